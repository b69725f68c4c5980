"""Write a quantized model as a compressed-tensors checkpoint (llm-compressor's layout, which vLLM and
transformers read): int4 and int8 `pack-quantized`, fp8 `float-quantized` with dynamic per-token
activations (FP8_DYNAMIC), int8-w8a8 `int-quantized` with dynamic per-token int8 activations
(llm-compressor's W8A8 preset, which vLLM serves on int8 tensor cores).

Fused layers are split back into the checkpoint's q/k/v and gate/up tensors (or kept whole where the
checkpoint keeps them fused, as GLM-4's gate_up), and stacked experts back into the checkpoint's layout
(the experts module's `checkpoint_tensor`: one tensor per expert, or gpt-oss's stacked, transposed,
gate/up-interleaved tensors and their biases), so the folder has the original architecture's names. A
model whose source stores some weights in a format it dequantizes at load (gpt-oss's MXFP4 experts) names
its float layout in `float_stacked_params`, which the writer then uses: those weights are written
dequantized, in the model dtype, and the source's quantization_config is replaced. A mixture of experts'
experts and routers stay in the model dtype (only linear layers are quantized), and the config's `ignore`
says so, as llm-compressor's references keep the router in float; so do DeepSeek's latent-attention
projections (q_a_proj, kv_a_proj_with_mqa, kv_b_proj).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from model_optimizer.model.inspect.fix import carried_files
from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.linear import Linear
from model_optimizer.runtime.layers.moe import FusedExperts, TopKRouter
from model_optimizer.runtime.models.model_config import read_config, text_model_config

FORMATS = {
    "fp8": "float-quantized",
    "int8": "pack-quantized",
    "int8-w8a8": "int-quantized",
    "awq": "pack-quantized",
    "rtn-int4": "pack-quantized",
}
WRITTEN_FILES = {"config.json", "quantization_report.json"}
"""Files the quantized folder has of its own; every other non-weight file of the source is copied
(inspect.fix.carried_files) but NOT_CARRIED."""
NOT_CARRIED = {"README.md"}
"""The original's model card: it describes the original's weights, and its Hub metadata would present
the quantized copy as the original."""


def compressed_tensors_config(method: str, group_size: int) -> dict:
    """The quantization_config block llm-compressor writes for the same scheme."""
    if method == "fp8":
        weights = dict(num_bits=8, type="float", symmetric=True, strategy="channel", group_size=None)
    elif method in ("int8", "int8-w8a8"):
        weights = dict(num_bits=8, type="int", symmetric=True, strategy="channel", group_size=None)
    else:
        weights = dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=group_size)
    inputs = None
    if method in ("fp8", "int8-w8a8"):  # activations quantized per token at run time, in the weights' type
        inputs = dict(num_bits=8, type=weights["type"], symmetric=True, strategy="token", dynamic=True, observer=None)
    weights.update(dynamic=False, observer="minmax", actorder=None, block_structure=None)
    fmt = FORMATS[method]
    group = dict(targets=["Linear"], weights=weights, input_activations=inputs, output_activations=None, format=fmt)
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "global_compression_ratio": None,
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "sparsity_config": {},
        "transform_config": {},
        "version": _ct_version(),
    }


def _ct_version() -> str:
    try:
        from compressed_tensors import __version__

        return str(__version__)
    except ImportError:
        return "0.20.1"


def compressed_layer_tensors(layer: Linear, method: str) -> dict[str, torch.Tensor]:
    """One unfused slice of a quantized layer (qweight etc. already cut to its rows) in the CT layout."""
    n = layer.qweight.shape[0]
    k = layer.in_features
    if method in ("fp8", "int8-w8a8"):  # float- / int-quantized: the codes as they are
        return {"weight": layer.qweight, "weight_scale": layer.scales.reshape(n, 1)}
    shape = torch.tensor([n, k], dtype=torch.int64)
    if method == "int8":
        # little-endian bytes q + 128, four per int32 along K
        packed = (layer.qweight.to(torch.int16) + 128).to(torch.uint8).contiguous().view(torch.int32)
        return {"weight_packed": packed, "weight_scale": layer.scales.reshape(n, 1), "weight_shape": shape}
    zeros = layer.zeros.T  # (K // G, N): packed along N, padded with zeros as compressed-tensors does
    pad = -n % 8
    if pad:
        zeros = torch.cat([zeros, torch.zeros(zeros.shape[0], pad, dtype=zeros.dtype)], dim=1)
    return {
        "weight_packed": layer.qweight,
        "weight_scale": layer.scales,
        "weight_zero_point": ref.pack_int4(zeros).T.contiguous(),
        "weight_shape": shape,
    }


class _Slice:
    """Rows [start, start + size) of a quantized layer, shaped like a layer for compressed_layer_tensors."""

    def __init__(self, layer: Linear, start: int, size: int) -> None:
        self.in_features = layer.in_features
        stored = layer.quant_method.checkpoint_tensors(layer)  # the checkpoint's packing, not the kernels'
        self.qweight = stored.qweight[start : start + size]
        self.scales = stored.scales[start : start + size]
        self.zeros = stored.zeros[start : start + size] if stored.zeros is not None else None


EXPERTS_IGNORE = "re:.*\\.experts(\\..*)?$"
"""A mixture of experts' experts, left in the model dtype (compressed-tensors' regex form); its routers are
ignored under their checkpoint name (moe_ignore)."""
MLA_IGNORE = ["re:.*\\.q_a_proj$", "re:.*\\.kv_a_proj_with_mqa$", "re:.*\\.kv_b_proj$"]
"""Multi-head latent attention's compressing projections (llm-compressor's DeepSeek references keep
q_a_proj and kv_a_proj_with_mqa in float) and kv_b_proj, whose rows the absorbed attention uses as
matrices (layers/mla.py): left in the model dtype."""


def checkpoint_slices(name: str, module: Linear, unstack: dict) -> list[tuple[str, int, int]]:
    """(checkpoint module name, first row, rows) of each tensor a linear layer of ours came from."""
    dotted = name + "."
    fused = {s: o for (o, s) in unstack if o in dotted}
    offsets = getattr(module, "shard_offsets", None)
    if not fused or offsets is None:
        return [(name, 0, module.out_features)]
    if all(s in fused for s in offsets):
        return [(dotted.replace(fused[s], unstack[(fused[s], s)])[:-1], start, n) for s, (start, n) in offsets.items()]
    whole = next(s for s in fused if s not in offsets)  # the checkpoint keeps the layer fused (GLM-4's gate_up)
    return [(dotted.replace(fused[whole], unstack[(fused[whole], whole)])[:-1], 0, module.out_features)]


def checkpoint_name(name: str, unstack: dict) -> str:
    """The checkpoint's name of our module `name` (Mixtral's `mlp.gate` is `block_sparse_moe.gate`)."""
    dotted = name + "."
    renamed = next((dotted.replace(o, theirs) for (o, _), theirs in unstack.items() if o in dotted), dotted)
    return renamed[:-1]


def moe_ignore(model: nn.Module, unstack: dict) -> list[str]:
    """The `ignore` entries of a mixture of experts' experts and routers (the routers' last name: `gate`,
    gpt-oss's `router`); none for a model without experts."""
    if not any(isinstance(m, FusedExperts) for m in model.modules()):
        return []
    routers = {
        checkpoint_name(name, unstack).rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, TopKRouter)
    }
    return [EXPERTS_IGNORE] + [f"re:.*\\.{router}$" for router in sorted(routers)]


def writer_unstack(model: nn.Module) -> dict[tuple[str, str], str]:
    """(our parameter fragment, shard) -> the checkpoint's name fragment, of the float layout the writer
    writes (`float_stacked_params` where the model has one, else its loader's `stacked_params`)."""
    stacked = getattr(model, "float_stacked_params", getattr(model, "stacked_params", {}))
    return {(ours, shard): theirs for theirs, (ours, shard) in stacked.items()}


def unstacked(model: nn.Module, name: str, param: torch.Tensor, unstack: dict) -> dict[str, torch.Tensor]:
    """A parameter that is no linear layer's under its checkpoint name(s): stacked experts in the checkpoint's
    layout (the module's `checkpoint_tensor`), a renamed one (Mixtral's router) whole."""
    matches = [(o, s) for (o, s) in unstack if o in name]
    if not matches:
        return {name: param.data}
    module = model.get_submodule(name.rsplit(".", 1)[0])
    split = getattr(module, "checkpoint_tensor", None)
    return {name.replace(o, unstack[(o, s)]): split(param, s) if split else param.data for o, s in matches}


def model_state(model: nn.Module, method: str) -> dict[str, torch.Tensor]:
    """Checkpoint tensors of the whole model, names as in the original (float) checkpoint."""
    unstack = writer_unstack(model)
    state: dict[str, torch.Tensor] = {}
    handled: set[str] = set()
    for name, module in model.named_modules():
        if not isinstance(module, Linear):
            continue
        for prefix, start, size in checkpoint_slices(name, module, unstack):
            if module.quant_method is not None:
                for key, t in compressed_layer_tensors(_Slice(module, start, size), method).items():  # type: ignore[arg-type]
                    state[f"{prefix}.{key}"] = t
            else:
                state[f"{prefix}.weight"] = module.weight.data[start : start + size]
            if module.bias is not None:
                state[f"{prefix}.bias"] = module.bias.data[start : start + size]
        handled.update(f"{name}.{p}" for p, _ in module.named_parameters(recurse=False))
    tied = getattr(getattr(model, "args", None), "tie_word_embeddings", False)
    for name, param in model.named_parameters():
        if name not in handled and not (tied and name == "lm_head.weight"):
            state.update(unstacked(model, name, param, unstack))
    return {k: v.detach().cpu().contiguous() for k, v in state.items()}


def save_compressed_tensors(model: nn.Module, method: str, group_size: int, src_dir: Path, out_dir: Path) -> None:
    """model.safetensors, config.json with quantization_config, and the source folder's other files (its
    tokenizer in any format, the custom code of a trust_remote_code model, its licence and model card)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(model_state(model, method), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    # the config as the loader resolved it: an `architectures` list filled in from model_type where the
    # source has none (vLLM and transformers pick the model class from it), and an image-and-text
    # checkpoint's language model flattened, since the tensors are written under its own names
    config = text_model_config(read_config(src_dir), src_dir / "config.json")
    config = {k: v for k, v in config.items() if k != "text_of"}
    config["quantization_config"] = compressed_tensors_config(method, group_size)
    config["quantization_config"]["ignore"] += moe_ignore(model, writer_unstack(model))
    if any(type(m).__name__ == "LatentLinear" for m in model.modules()):
        config["quantization_config"]["ignore"] += MLA_IGNORE
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for path in carried_files(src_dir, WRITTEN_FILES | NOT_CARRIED):
        shutil.copy2(path, out_dir / path.name)
