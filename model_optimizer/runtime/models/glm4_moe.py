"""GLM-4.5, 4.6 and 4.7 (`Glm4MoeForCausalLM`): Llama's layer with DeepSeek-V3's mixture of experts.

Each as transformers' Glm4Moe computes it:
- attention: grouped-query, a bias on q, k and v (`attention_bias`; o_proj has none), optional per-head
  q/k RMSNorm (`use_qk_norm`), rotary on the first `partial_rotary_factor` of each head in Llama's halves
  (not GLM-4's interleaved pairs: layers/partial_rotary.py);
- feed-forward: a dense MLP in the first `first_k_dense_replace` layers, then DeepSeek-V3's experts
  (sigmoid routing with the correction bias, `n_group`/`topk_group`, `norm_topk_prob`,
  `routed_scaling_factor`) beside `n_shared_experts` shared ones (models/deepseek_moe.py);
- the layer itself is Llama's pre-norm block (two norms, not GLM-4's four).

The checkpoint's multi-token-prediction layers (`num_nextn_predict_layers`, after the last decoder layer)
are skipped: generation does not use them.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from model_optimizer.runtime.layers.moe import expert_stacked_params
from model_optimizer.runtime.layers.partial_rotary import PartialRotaryEmbedding
from model_optimizer.runtime.layers.rotary import RopeConfig
from model_optimizer.runtime.models.deepseek import unused_checkpoint_key
from model_optimizer.runtime.models.deepseek_moe import deepseek_moe_args, deepseek_moe_block
from model_optimizer.runtime.models.family_defaults import with_family_defaults
from model_optimizer.runtime.models.glm4 import partial_rotary_factor
from model_optimizer.runtime.models.llama import DecoderLayer, DecoderMLP, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import is_sparse_layer


class Glm4MoeDecoderLayer(DecoderLayer):
    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        return deepseek_moe_block(args) if is_sparse_layer(args.hf, layer_idx) else DecoderMLP(args)


class Glm4MoeForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        args = replace(args, hf=with_family_defaults(args.hf, "Glm4MoeForCausalLM"))
        moe = deepseek_moe_args(args.hf)  # a plain message for a broken config before any layer is built
        rope = RopeConfig.from_hf(args.hf, args.head_dim, args.max_position_embeddings)
        rotary = PartialRotaryEmbedding(rope, int(args.head_dim * partial_rotary_factor(args.hf)), interleaved=False)
        args = replace(
            args, qkv_bias=args.attention_bias, attention_bias=False, qk_norm=bool(args.hf.get("use_qk_norm"))
        )
        super().__init__(args, Glm4MoeDecoderLayer, rotary)
        self.stacked_params = {**expert_stacked_params(moe.num_experts), **LlamaForCausalLM.stacked_params}
        self.num_shared_experts = moe.num_shared_experts

    def skips_checkpoint_key(self, name: str) -> bool:
        """The multi-token-prediction layers after the last decoder layer, and empty shared experts: generation
        does not use them."""
        return unused_checkpoint_key(name, self.args.num_layers, self.num_shared_experts)
