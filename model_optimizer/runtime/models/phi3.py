"""Phi-3 and Phi-4 (Phi3ForCausalLM: Phi-3-mini 4k/128k, Phi-3-medium, Phi-3.5-mini, Phi-4, Phi-4-mini).

The Llama decoder, with these differences, each as transformers' Phi3 computes it:
- the checkpoint holds q, k and v in one `self_attn.qkv_proj.weight` [q; k; v] and gate and up in one
  `mlp.gate_up_proj.weight` [gate; up]; each is split into its shards as it loads, so tensor parallelism
  keeps each rank's rows of q, k and v (of gate and up), never a cut through the fused tensor;
- rotary covers the first `partial_rotary_factor` of each head (Phi-4-mini: 0.75) in halves, as Llama's
  does the whole head (layers/partial_rotary.py; 1, the default, is Llama's rotary and its fused kernel);
- `rope_scaling` may be longrope (layers/longrope_rotary.py: which factors, short or long, is chosen by
  max_model_len); as in transformers' Phi3Config, the legacy names "su" and "yarn" mean longrope and no
  other scaling is accepted;
- `sliding_window` applies to every layer whenever set (Phi-3-mini-4k's 2047; model_config.WINDOW_SWITCH);
- no bias anywhere (a config's `attention_bias` is ignored: model_config.NO_ATTENTION_BIAS);
- transformers' Phi3Config defaults for what config.json leaves out: rms_norm_eps 1e-5, and a top-level
  original_max_position_embeddings of 4096, which wins over the rope settings' own.
`resid_pdrop` and `embd_pdrop` are dropout, which inference skips. Phi-4 is this model with plain rope.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, reads_lazily
from model_optimizer.runtime.layers.linear import MergedLinear
from model_optimizer.runtime.layers.partial_rotary import PartialRotaryEmbedding
from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding
from model_optimizer.runtime.models.llama import DecoderLayer, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs, context_length

PHI3_DEFAULTS = {"rms_norm_eps": 1e-5, "original_max_position_embeddings": 4096}
"""transformers' Phi3Config values for keys config.json may leave out, where DecoderArgs and the rope code would
take others (1e-6; max_position_embeddings)."""
PHI3_ROPE_TYPES = ("default", "longrope")
"""The rope types Phi3ForCausalLM reads, as transformers' Phi3Config does (RopeConfig.from_hf's `rope_types`)."""
ROPE_NAMES = {"default": "default", "longrope": "longrope", "su": "longrope", "yarn": "longrope"}
"""The rope type names transformers' Phi3Config accepts -> which of PHI3_ROPE_TYPES it reads them as."""


def phi3_config(hf: dict) -> dict:
    """config.json as transformers' Phi3Config reads it: PHI3_DEFAULTS filled in, each rope settings object's
    type renamed by ROPE_NAMES (as `rope_type`); ValueError for any other rope type."""
    out = hf | {key: value for key, value in PHI3_DEFAULTS.items() if hf.get(key) is None}
    for key in ("rope_parameters", "rope_scaling"):
        params = out.get(key)
        if not isinstance(params, dict) or not params:
            continue
        params = dict(params)
        rope_type = params.pop("type", None)
        rope_type = params.get("rope_type", rope_type or "default")
        if rope_type not in ROPE_NAMES:
            raise ValueError(
                f"config.json: rope_type {rope_type!r} is not supported for Phi3ForCausalLM; "
                "supported: default, longrope (su and yarn are read as longrope, as transformers does)"
            )
        out[key] = params | {"rope_type": ROPE_NAMES[rope_type]}
    return out


def partial_rotary_factor(hf: dict) -> float:
    """The rotated share of each head: the rope settings' own, else config.json's top-level one, else 1."""
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    factor = rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config.json: partial_rotary_factor must be in (0, 1], got {factor!r}")
    return float(factor)


def fused_loader(layer: MergedLinear, whole: str) -> Callable:
    """A weight_loader for `layer` that also takes shard `whole`: one checkpoint tensor of all its shards in
    order, split here so that each shard loads (and, under tensor parallelism, is sliced) as its own."""

    @reads_lazily
    def load(param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        if shard_id != whole:
            return layer._load_shard(param, loaded, shard_id)
        rows = sum(layer.shard_sizes.values())
        if tuple(loaded.shape) != (rows, layer.in_features):
            raise ValueError(
                f"expected shape {(rows, layer.in_features)} for [{'; '.join(layer.shard_sizes)}], "
                f"got {tuple(loaded.shape)}"
            )
        start = 0
        for name, size in layer.shard_sizes.items():
            layer._load_shard(param, loaded.narrow(0, start, size), name)
            start += size

    return load


class Phi3DecoderLayer(DecoderLayer):
    """Llama's layer whose q/k/v and gate/up weights load from the checkpoint's fused tensors."""

    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: nn.Module) -> None:
        super().__init__(args, layer_idx, rotary)
        for layer, whole in ((self.self_attn.qkv_proj, "qkv"), (self.mlp.gate_up_proj, "gate_up")):
            layer.weight.weight_loader = fused_loader(layer, whole)  # type: ignore[attr-defined]


def phi3_rotary(args: DecoderArgs) -> nn.Module:
    """Llama's rotary (and its fused kernel) over whole heads, else the first `partial_rotary_factor` of each
    head in halves; longrope's factors chosen by the engine's max_model_len."""
    rotary_dim = int(args.head_dim * partial_rotary_factor(args.hf))
    rope = RopeConfig.from_hf(args.hf, rotary_dim, args.max_position_embeddings, args.max_model_len, PHI3_ROPE_TYPES)
    if rotary_dim == args.head_dim:
        return RotaryEmbedding(rope)
    return PartialRotaryEmbedding(rope, rotary_dim, interleaved=False)


class Phi3ForCausalLM(LlamaForCausalLM):
    stacked_params = {
        ".qkv_proj.": (".qkv_proj.", "qkv"),
        ".gate_up_proj.": (".gate_up_proj.", "gate_up"),
    }

    def __init__(self, args: DecoderArgs) -> None:
        hf = phi3_config(args.hf)
        args = replace(args, hf=hf, rms_norm_eps=float(hf["rms_norm_eps"]), max_position_embeddings=context_length(hf))
        super().__init__(args, Phi3DecoderLayer, phi3_rotary(args))
