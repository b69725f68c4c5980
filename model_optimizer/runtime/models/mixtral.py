"""Mixtral: the Mistral decoder (sliding window when the config sets one) with a mixture of experts
in every layer, top-k weights always renormalized.

The checkpoint calls the block `block_sparse_moe` (router `block_sparse_moe.gate.weight`, experts
`block_sparse_moe.experts.<e>.w1/w3/w2.weight` for gate/up/down); the layer keeps it as `mlp`, as
every other family does, and `stacked_params` maps the names.
"""

from __future__ import annotations

from torch import nn

from model_optimizer.runtime.layers.moe import (
    MIXTRAL_EXPERT_NAMES,
    FusedExperts,
    SparseMoeBlock,
    TopKRouter,
    expert_stacked_params,
)
from model_optimizer.runtime.models.llama import DecoderLayer, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import MoeArgs


def moe_args(args: DecoderArgs) -> MoeArgs:
    return MoeArgs.from_hf(args.hf, "intermediate_size", renormalize=True)


class MixtralDecoderLayer(DecoderLayer):
    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        moe = moe_args(args)
        return SparseMoeBlock(
            TopKRouter(args.hidden_size, moe.num_experts, moe.top_k, moe.renormalize),
            FusedExperts(moe.num_experts, args.hidden_size, moe.intermediate_size),
        )


class MixtralForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        moe = moe_args(args)
        super().__init__(args, MixtralDecoderLayer)
        experts = expert_stacked_params(moe.num_experts, MIXTRAL_EXPERT_NAMES)
        self.stacked_params = {
            **{
                f".block_sparse_moe{fragment}": (f".mlp{target}", shard)
                for fragment, (target, shard) in experts.items()
            },
            # the router is one whole tensor; the shard id only carries the rename through the loader
            ".block_sparse_moe.gate.": (".mlp.gate.", "router"),
            **LlamaForCausalLM.stacked_params,
        }
