"""Quantized folders written by the compressed-tensors package itself, the way llm-compressor saves them:
transformers' model with `apply_quantization_config`, min-max weight scales (llm-compressor's default
observer), then `ModelCompressor.compress_model` and `update_config`. Nothing of ours takes part, so
what our loader makes of these folders is checked against a writer no one here wrote."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch

WINDOW = list(range(5, 37))
"""Token ids whose logits the tests compare (inside the tiny vocabulary)."""


def _min_max(weight: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """The range of each quantization group of `weight` (N, K) for the args' strategy."""
    n, k = weight.shape
    if args.strategy == "tensor":
        return weight.amin().reshape(1), weight.amax().reshape(1)
    if args.strategy == "channel":
        return weight.amin(1, keepdim=True), weight.amax(1, keepdim=True)
    if args.strategy == "group":
        groups = weight.reshape(n, k // args.group_size, args.group_size)
        return groups.amin(-1), groups.amax(-1)
    rows, cols = args.block_structure  # block: (ceil(N / rows), ceil(K / cols)) scales, edges padded
    padded = torch.nn.functional.pad(weight, (0, -k % cols, 0, -n % rows))
    blocks = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // cols, cols)
    return blocks.amin((1, 3)), blocks.amax((1, 3))


def _calibrate(model: torch.nn.Module) -> None:
    """Fill every quantized module's weight scale and zero point from its weight (calculate_qparams)."""
    from compressed_tensors.quantization import QuantizationStatus
    from compressed_tensors.quantization.utils import calculate_qparams

    with torch.no_grad():
        for module in model.modules():
            scheme = getattr(module, "quantization_scheme", None)
            if scheme is None or scheme.weights is None or not hasattr(module, "weight_scale"):
                continue
            scale, zero = calculate_qparams(*_min_max(module.weight.float(), scheme.weights), scheme.weights)
            module.weight_scale.data = scale.to(module.weight_scale.dtype).reshape(module.weight_scale.shape)
            if hasattr(module, "weight_zero_point"):
                zp = module.weight_zero_point
                zp.data = zero.to(zp.dtype).reshape(zp.shape)
            if hasattr(module, "input_scale"):
                module.input_scale.data.fill_(0.05)
            module.quantization_status = QuantizationStatus.FROZEN


def write_reference(
    src: Path,
    out: Path,
    config,
    compress: bool = True,
    quantization_format: str | None = None,
    prepare: Callable[[torch.nn.Module], None] | None = None,
) -> Path:
    """Quantize the float folder `src` with the QuantizationConfig `config` and save it compressed to `out`
    (with `compress` False, as saved uncompressed: float weights beside their scales). `prepare` edits the
    transformers model first (a transform, say)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import apply_quantization_config
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    if prepare is not None:
        prepare(model)
    apply_quantization_config(model, config)
    _calibrate(model)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format)
    if compress:
        compressor.compress_model(model)
    model.save_pretrained(str(out))
    compressor.update_config(str(out))
    for path in src.iterdir():
        if path.name.startswith("tokenizer") or path.suffix == ".jinja":
            shutil.copy(path, out / path.name)
    return out


def scheme(preset: str, targets: list[str] | None = None):
    """compressed-tensors' preset scheme (W4A16, FP8_DYNAMIC ...) on `targets` (default: every Linear)."""
    from compressed_tensors.quantization import preset_name_to_scheme

    return preset_name_to_scheme(preset, targets or ["Linear"])


def transformers_logits(folder: Path, decompress: bool = True) -> torch.Tensor:
    """transformers' logits of WINDOW for a compressed-tensors folder (weights decompressed at load)."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    kwargs = {"quantization_config": CompressedTensorsConfig(run_compressed=False)} if decompress else {}
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **kwargs)
    with torch.no_grad():
        return model(torch.tensor([WINDOW])).logits[0].float()


def engine_logits(folder: Path) -> torch.Tensor:
    """Our loader's model's logits of WINDOW on the CPU, in float32."""
    from model_optimizer.model.quantize.forward import window_logits
    from model_optimizer.runtime.models.loader import load_model

    model = load_model(folder, "float32", torch.device("cpu"))
    return window_logits(model, WINDOW, torch.device("cpu"))
