"""Qwen3-MoE: the Qwen3 decoder (q/k RMSNorm) whose feed-forward blocks are mixtures of experts.

A layer is sparse unless it is listed in `mlp_only_layers` or falls between `decoder_sparse_step`
strides ((layer + 1) % step != 0), as in transformers; dense layers keep the Qwen3 MLP of
`intermediate_size`. Experts have `moe_intermediate_size`; `norm_topk_prob` renormalizes the top-k
weights. Checkpoint names: `mlp.gate.weight` (router), `mlp.experts.<e>.{gate,up,down}_proj.weight`.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from model_optimizer.runtime.layers.moe import FusedExperts, SparseMoeBlock, TopKRouter, expert_stacked_params
from model_optimizer.runtime.models.llama import DecoderLayer, DecoderMLP, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import MoeArgs, is_sparse_layer


def moe_args(args: DecoderArgs) -> MoeArgs:
    return MoeArgs.from_hf(args.hf, "moe_intermediate_size", bool(args.hf.get("norm_topk_prob", False)))


class Qwen3MoeDecoderLayer(DecoderLayer):
    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        if not is_sparse_layer(args.hf, layer_idx):
            return DecoderMLP(args)
        moe = moe_args(args)
        return SparseMoeBlock(
            TopKRouter(args.hidden_size, moe.num_experts, moe.top_k, moe.renormalize),
            FusedExperts(moe.num_experts, args.hidden_size, moe.intermediate_size),
        )


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        moe = moe_args(args)  # a plain message for a broken config before any layer is built
        super().__init__(replace(args, qk_norm=True), Qwen3MoeDecoderLayer)
        self.stacked_params = {**expert_stacked_params(moe.num_experts), **LlamaForCausalLM.stacked_params}
