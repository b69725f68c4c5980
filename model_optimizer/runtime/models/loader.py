"""Build a model from a checkpoint folder: safetensors (single or sharded) or dummy weights.

The loader only maps checkpoint names to parameters; each parameter's `weight_loader` puts the
tensor in place (a slice of a fused projection, say) and checks its shape. It hands each loader a
LazyTensor (layers/lazy_tensor.py): under tensor parallelism a rank reads only the slice it keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn

from model_optimizer.runtime.distributed import TensorParallel, get_tp
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor
from model_optimizer.runtime.layers.linear import default_weight_loader
from model_optimizer.runtime.layers.quantization.spec import QuantSpec, resolve_spec
from model_optimizer.runtime.models.checkpoint_reader import iterate_lazy_checkpoint, read_lazy, unreadable
from model_optimizer.runtime.models.model_config import DecoderArgs, read_config
from model_optimizer.runtime.models.registry import resolve_model_class
from model_optimizer.runtime.runner.weight_offload import (
    choose_offloaded_layers,
    decoder_layers,
    estimated_bytes,
    offload_layers,
)

SKIPPED_SUFFIXES = ("rotary_emb.inv_freq",)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_dtype(requested: str, args: DecoderArgs, device: torch.device) -> torch.dtype:
    """The one rule for `--dtype auto`: the checkpoint's dtype on a GPU. On the CPU, float32 stays,
    float16 becomes float32 (CPUs have no fast float16 matmul), and bfloat16 stays only where this CPU
    measured bfloat16 matmuls faster than float32 ones (environment/cpu_speed.py: with AVX2 alone
    they run several times slower)."""
    if requested != "auto":
        return DTYPES[requested]
    dtype = DTYPES.get(args.torch_dtype.replace("torch.", ""), torch.float32)
    if device.type != "cpu" or dtype == torch.float32:
        return dtype
    if dtype == torch.bfloat16:
        from model_optimizer.environment.cpu_speed import cpu_speed

        return DTYPES[cpu_speed().dtype]
    return torch.float32


def load_model(
    model_dir: str | Path,
    dtype: str,
    device: torch.device,
    load_format: str = "auto",
    quantization: str | None = None,
    cpu_offload_gb: float = 0.0,
    max_model_len: int | None = None,
) -> nn.Module:
    """Instantiate the model named by config.json and fill its weights (quantized as config.json's
    quantization_config or `quantization` says). With `cpu_offload_gb`, the layers chosen to hold that
    many GiB are built in host memory and stream in at each forward (`model.weight_offload`).
    `max_model_len`: the engine's, when given (DecoderArgs.max_model_len: longrope's factors depend on it)."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization, process_quantized_weights

    args = DecoderArgs.from_dict(read_config(model_dir), source=str(Path(model_dir) / "config.json"))
    args.max_model_len = max_model_len
    model_cls = resolve_model_class(args.architecture)
    spec = spec_for_folder(model_dir, quantization)
    refuse_pre_quantized(spec, load_format, get_tp().size)
    torch_dtype = resolve_dtype(dtype, args, device)
    if cpu_offload_gb:
        args.host_layer_ids = plan_offload(lambda: model_cls(args), spec, torch_dtype, cpu_offload_gb, load_format)
    model = build_model(lambda: model_cls(args), torch_dtype, device)
    attach_quantization(model, spec, torch_dtype, dummy=load_format == "dummy")
    if load_format == "dummy":
        init_dummy_weights(model, device=device)  # drawn on `device` wherever a layer lives: same values
    else:
        load_weights(model, Path(model_dir))
    process_quantized_weights(model)
    if cpu_offload_gb:
        model.weight_offload = offload_layers(model, sorted(args.host_layer_ids), device)
    return model.eval()


def plan_offload(
    factory: Callable[[], nn.Module],
    spec: QuantSpec | None,
    dtype: torch.dtype,
    cpu_offload_gb: float,
    load_format: str,
) -> frozenset[int]:
    """The decoder layers that hold `cpu_offload_gb` GiB, sized on a copy of the model built on the meta
    device (no memory), quantized as the real one will be; ValueError when the layers hold less."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization

    if cpu_offload_gb < 0:
        raise ValueError(f"cpu_offload_gb must be >= 0 (0: off), got {cpu_offload_gb}")
    meta = build_model(factory, dtype, torch.device("meta"))
    attach_quantization(meta, spec, dtype, dummy=load_format == "dummy")
    sizes = [estimated_bytes(layer) for layer in decoder_layers(meta)]
    return frozenset(choose_offloaded_layers(sizes, int(cpu_offload_gb * 2**30)))


def spec_for_folder(model_dir: str | Path, quantization: str | None) -> QuantSpec | None:
    """How the folder's weights are quantized: config.json's quantization_config, or `quantization` (a
    float checkpoint rounded at load time); None for plain float weights."""
    return resolve_spec(read_config(model_dir), quantization)


def check_tensor_parallel(
    model_dir: str | Path, size: int, quantization: str | None = None, load_format: str = "auto"
) -> None:
    """ValueError when the checkpoint cannot be split over `size` ranks, from config.json alone: for the
    driver, before any worker process starts (each rank's model checks the same again as it builds)."""
    if size < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got {size}")
    if size == 1:
        return
    args = DecoderArgs.from_dict(read_config(model_dir), source=str(Path(model_dir) / "config.json"))
    resolve_model_class(args.architecture)
    tp = TensorParallel(0, size)
    tp.shard(args.num_heads, "num_attention_heads")
    tp.kv_heads(args.num_kv_heads)
    tp.shard(args.intermediate_size, "intermediate_size")
    refuse_pre_quantized(spec_for_folder(model_dir, quantization), load_format, size)


def refuse_pre_quantized(spec: object | None, load_format: str, size: int) -> None:
    """Pre-quantized checkpoints (AutoAWQ, compressed-tensors, block FP8) are staged whole and
    converted per layer (layers/quantization/sources.py), which knows nothing of shards: refuse them under tensor
    parallelism rather than load a wrong model. Quantizing a float checkpoint on the fly works, as
    each rank rounds its own shard."""
    source = getattr(spec, "source", "dense")
    if size > 1 and source != "dense" and load_format != "dummy":
        raise ValueError(
            f"tensor_parallel_size {size} does not support pre-quantized checkpoints ({source} layout) yet; "
            "use tensor_parallel_size 1, or a float checkpoint with --quantization fp8, int8, int8-w8a8 or rtn-int4"
        )


def build_model(factory: Callable[[], nn.Module], dtype: torch.dtype, device: torch.device) -> nn.Module:
    """Run `factory` with parameters created directly on `device` in `dtype`."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return factory()
    finally:
        torch.set_default_dtype(default)


def init_dummy_weights(model: nn.Module, seed: int = 0, device: torch.device | None = None) -> None:
    """Random weights from the config alone (for benchmarks): small uniform values, norms at one.
    Drawn on `device` (default: the parameter's own), so an 8B model fills in seconds on a GPU and a
    layer kept in host memory (cpu_offload_gb) gets the very values it would have on the GPU."""
    with torch.no_grad():
        for i, (name, param) in enumerate(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            where = param.device if device is None or device.type == param.device.type else device
            generator = torch.Generator(device=where).manual_seed(seed + i)
            if where == param.device:
                param.uniform_(-1e-2, 1e-2, generator=generator)
            else:
                param.copy_(torch.empty_like(param, device=where).uniform_(-1e-2, 1e-2, generator=generator))


def load_weights(
    model: nn.Module,
    model_dir: Path,
    rename: Callable[[str], str | None] | None = None,
    stacked: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Copy every checkpoint tensor into its parameter; fail on unknown, misshapen or missing ones.

    `rename` maps a checkpoint name to the model's (None: skip the tensor); by default rotary
    caches and a tied lm_head are skipped. `stacked` declares fused projections (default: the
    model's `stacked_params`).
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    stacked = getattr(model, "stacked_params", {}) if stacked is None else stacked
    tied = getattr(getattr(model, "args", None), "tie_word_embeddings", False)
    rename = rename or _default_rename(model, tied)
    expected_shards = _expected_shards(params, stacked)
    buffers = dict(model.named_buffers())
    modules = dict(model.named_modules())
    loaded: set[tuple[str, str | None]] = set()
    for path, name, tensor in iterate_lazy_checkpoint(model_dir):
        renamed = rename(name)
        if renamed is None:
            continue
        target, shard = _target_name(renamed, stacked)
        param = params.get(target)
        if param is None and (scale := buffers.get(kv_scale_buffer(renamed) or "")) is not None:
            _load_kv_scale(scale, read_lazy(path, tensor, torch.float32), path, name)
            continue
        if param is None and _static_input_scale(target, modules):
            continue
        if param is None:
            raise _foreign_tensor(path, name, model)
        _load_tensor(param, shard, tensor, path, name)
        loaded.add((target, shard))
    missing = sorted(
        f"{p}[{s}]" if s else p for p, s in expected_shards - loaded if not (tied and p == "lm_head.weight")
    )
    if missing:
        raise ValueError(f"checkpoint {model_dir} lacks weights for: {', '.join(missing[:10])}")


def _default_rename(model: nn.Module, tied: bool) -> Callable[[str], str | None]:
    """load_weights' default `rename`: the model's own names for some tensors (`checkpoint_name`, Gemma 3's),
    and None for the tensors skipped on purpose and for a tied lm_head."""
    own_key = getattr(model, "checkpoint_name", None)

    def rename(name: str) -> str | None:
        if own_key is not None and (name := own_key(name)) is None:
            return None
        return None if skipped_on_purpose(model, name) or (tied and name == "lm_head.weight") else name

    return rename


def _load_tensor(param: nn.Parameter, shard: str | None, tensor: LazyTensor, path: Path, name: str) -> None:
    """Hand checkpoint tensor `name` to its parameter's weight_loader (`shard` of a fused projection), its
    errors naming the file and the tensor."""
    loader = getattr(param, "weight_loader", default_weight_loader)
    # a loader that slices for itself gets the unread tensor; any other the whole one, in its dtype
    value = tensor if getattr(loader, "reads_lazily", False) else read_lazy(path, tensor, param.dtype)
    try:
        with torch.no_grad():
            loader(param, value, shard) if shard else loader(param, value)
    except SafetensorError as exc:
        raise unreadable(path, exc) from None
    except ValueError as exc:
        raise ValueError(f"{path.name}: tensor {name!r}: {exc}") from None


QUANTIZED_SUFFIXES = (
    ".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_g_idx",
    ".weight_global_scale", ".weight_scale_inv", ".qweight", ".qzeros", ".scales",
)  # fmt: skip
"""The tensors a quantized weight is stored as (compressed-tensors, block-wise fp8, AutoAWQ)."""


def _foreign_tensor(path: Path, name: str, model: nn.Module) -> ValueError:
    """The error for checkpoint tensor `name` that no parameter of `model` takes: in words where it is part of
    a quantized weight of a module that loads unquantized (experts, lm_head), rather than a bare name."""
    suffix = next((s for s in QUANTIZED_SUFFIXES if name.endswith(s)), None)
    if suffix is None:
        return ValueError(f"{path.name}: tensor {name!r} does not belong to {type(model).__name__}")
    return ValueError(
        f"{path.name}: tensor {name!r}: {name.removesuffix(suffix)!r} is quantized in the checkpoint, but "
        f"{type(model).__name__} loads it unquantized: linear layers are quantized as quantization_config's "
        "targets and ignore say, while mixture-of-experts experts, the output head (lm_head) and embeddings always "
        "stay in the model dtype; use a checkpoint that leaves it unquantized (llm-compressor: list it in "
        "`ignore`), or the float checkpoint with --quantization"
    )


KV_SCALE_NAMES = (
    (".attn.k_scale", "k_scale"),
    (".attn.v_scale", "v_scale"),
    (".k_proj.output_scale", "k_scale"),
    (".v_proj.output_scale", "v_scale"),
    (".k_scale", "k_scale"),
    (".v_scale", "v_scale"),
)
"""A checkpoint's fp8 KV-cache scales as llm-compressor / compressed-tensors (`kv_cache_scheme`) and older
exports name them, and which of the attention layer's scales each is."""


def kv_scale_buffer(name: str) -> str | None:
    """The attention layer's buffer (`...self_attn.attn.k_scale`) a checkpoint's KV-cache scale goes to, or
    None for any other tensor."""
    for suffix, scale in KV_SCALE_NAMES:
        if name.endswith(suffix):
            return f"{name[: -len(suffix)]}.attn.{scale}"
    return None


def _static_input_scale(target: str, modules: dict[str, nn.Module]) -> bool:
    """Whether `target` is a quantized linear layer's static activation scale (`input_scale`, llm-compressor's
    FP8 and static W8A8 schemes): not read, as such layers run weight-only or quantize their activations
    per token at run time (quantization/spec.py)."""
    if not target.endswith(".input_scale"):
        return False
    module = modules.get(target[: -len(".input_scale")])
    return getattr(module, "quant_method", None) is not None


def _load_kv_scale(buffer: torch.Tensor, value: torch.Tensor, path: Path, name: str) -> None:
    """One per-tensor scale (the cache stores x / scale); a per-head or non-positive one is refused."""
    if value.numel() != 1 or not torch.isfinite(value).all() or value.item() <= 0:
        raise ValueError(
            f"{path.name}: tensor {name!r}: a KV-cache scale must be one positive number (per-tensor), "
            f"got shape {tuple(value.shape)}"
        )
    with torch.no_grad():
        buffer.copy_(value.reshape(()))


def skipped_on_purpose(model: nn.Module, name: str) -> bool:
    """Checkpoint tensors no model loads (rotary caches) and those a model says it does not use
    (`skips_checkpoint_key`: DeepSeek-V3's multi-token-prediction layer)."""
    skips = getattr(model, "skips_checkpoint_key", None)
    return name.endswith(SKIPPED_SUFFIXES) or (skips is not None and skips(name))


def _target_name(name: str, stacked: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    for fragment, (replacement, shard) in stacked.items():
        if fragment in name:
            return name.replace(fragment, replacement), shard
    return name, None


def _expected_shards(
    params: dict[str, nn.Parameter], stacked: dict[str, tuple[str, str]]
) -> set[tuple[str, str | None]]:
    expected: set[tuple[str, str | None]] = set()
    for name in params:
        shards = [s for frag, (rep, s) in stacked.items() if rep in name]
        expected.update((name, s) for s in shards) if shards else expected.add((name, None))
    return expected
