"""GLM-4 (GLM-4-9B-0414, GLM-4-32B-0414): the Llama decoder with four norms a layer and partial rotary.

Differences from Llama, each as transformers' Glm4 computes it:
- the attention output and the MLP output are each normalized (`post_self_attn_layernorm`,
  `post_mlp_layernorm`) before they join the residual;
- rotary covers the first `partial_rotary_factor` of each head, pairs interleaved
  (layers/partial_rotary.py);
- `attention_bias` puts a bias on q, k and v only (o_proj has none);
- the checkpoint holds gate and up fused in one `mlp.gate_up_proj.weight` [gate; up], which the
  layer's loader splits into its two shards (so tensor parallelism slices each half).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from model_optimizer.runtime.layers.attention import AttentionMetadata
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, reads_lazily
from model_optimizer.runtime.layers.linear import MergedLinear
from model_optimizer.runtime.layers.norm import RMSNorm
from model_optimizer.runtime.layers.partial_rotary import PartialRotaryEmbedding
from model_optimizer.runtime.layers.rotary import RopeConfig
from model_optimizer.runtime.models.llama import DecoderLayer, DecoderMLP, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs


def partial_rotary_factor(hf: dict) -> float:
    """transformers 5 keeps it in rope_parameters, 4 at the top level; 0.5 in GLM-4's checkpoints."""
    factor = (hf.get("rope_parameters") or {}).get("partial_rotary_factor", hf.get("partial_rotary_factor", 0.5))
    if not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"config.json: partial_rotary_factor must be in (0, 1], got {factor!r}")
    return float(factor)


class Glm4MLP(DecoderMLP):
    """The Llama MLP whose [gate | up] weight also loads from one fused checkpoint tensor."""

    def __init__(self, args: DecoderArgs) -> None:
        super().__init__(args)
        self.gate_up_proj.weight.weight_loader = self._load_fused  # type: ignore[attr-defined]

    @reads_lazily
    def _load_fused(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        layer: MergedLinear = self.gate_up_proj
        if shard_id != "gate_up":
            return layer._load_shard(param, loaded, shard_id)
        size = layer.shard_sizes["gate"]
        if tuple(loaded.shape) != (2 * size, layer.in_features):
            raise ValueError(
                f"expected shape {(2 * size, layer.in_features)} for [gate; up], got {tuple(loaded.shape)}"
            )
        layer._load_shard(param, loaded.narrow(0, 0, size), "gate")
        layer._load_shard(param, loaded.narrow(0, size, size), "up")


class Glm4DecoderLayer(DecoderLayer):
    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: nn.Module) -> None:
        super().__init__(args, layer_idx, rotary)
        self.post_self_attn_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_mlp_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        return Glm4MLP(args)

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h, _ = self.post_self_attn_layernorm(self.self_attn(positions, h, meta))
        h, residual = self.post_attention_layernorm(h, residual)  # residual + normed attention output
        h, _ = self.post_mlp_layernorm(self.mlp(h))
        return h, residual


class Glm4ForCausalLM(LlamaForCausalLM):
    stacked_params = {
        ".q_proj.": (".qkv_proj.", "q"),
        ".k_proj.": (".qkv_proj.", "k"),
        ".v_proj.": (".qkv_proj.", "v"),
        ".gate_up_proj.": (".gate_up_proj.", "gate_up"),
    }

    def __init__(self, args: DecoderArgs) -> None:
        rope = RopeConfig.from_hf(args.hf, args.head_dim, args.max_position_embeddings)
        rotary = PartialRotaryEmbedding(rope, int(args.head_dim * partial_rotary_factor(args.hf)))
        # attention_bias: q, k and v only
        args = replace(args, qkv_bias=args.attention_bias, attention_bias=False)
        super().__init__(args, Glm4DecoderLayer, rotary)
