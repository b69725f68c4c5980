"""GLM-4.7-Flash (`Glm4MoeLiteForCausalLM`): DeepSeek-V3's layer under GLM's config defaults.

transformers builds it from DeepseekV3Attention and GLM-4.5's experts, and so does this file
(models/deepseek.py with models/deepseek_moe.py's V3 router). What differs from DeepSeek-V3:
- which layers are dense: `mlp_layer_types` ("dense" / "sparse" per layer), by default a dense first
  layer and sparse ones after it; `first_k_dense_replace` is not read (models/moe_args.py);
- the defaults of keys a config.json leaves out (models/family_defaults.py: transformers' Glm4MoeLiteConfig's,
  GLM-4.7-Flash's own shapes); `rope_interleave` defaults to true as for V3 (layers/yarn_rotary.py);
- the rotary embedding reads `partial_rotary_factor`, where transformers' attention cannot run anything but
  whole rope parts: another factor is refused.
The attention (q_lora_rank pair or q_proj, latent cache, YaRN softmax correction under a yarn rope),
the routing (sigmoid, correction bias, groups, norm_topk_prob, routed_scaling_factor), the shared
experts and the skipped multi-token-prediction layer (`model.layers.<num_hidden_layers>`) are V3's.
"""

from __future__ import annotations

from dataclasses import replace

from model_optimizer.runtime.models.deepseek import DeepseekV3ForCausalLM
from model_optimizer.runtime.models.family_defaults import with_family_defaults
from model_optimizer.runtime.models.model_config import DecoderArgs, context_length
from model_optimizer.runtime.models.moe_args import mlp_layer_types
from model_optimizer.runtime.models.phi3 import partial_rotary_factor


def glm4_moe_lite_config(hf: dict) -> dict:
    """config.json as transformers' Glm4MoeLiteConfig reads it: family_defaults.GLM4_MOE_LITE filled in; ValueError for a
    `partial_rotary_factor` other than 1 or a malformed `mlp_layer_types`."""
    out = with_family_defaults(hf, "Glm4MoeLiteForCausalLM")
    factor = partial_rotary_factor(out)
    if factor != 1.0:
        raise ValueError(
            f"config.json: partial_rotary_factor {factor} is not supported for Glm4MoeLiteForCausalLM: its "
            "qk_rope_head_dim values are rotated whole (transformers' attention cannot run another factor)"
        )
    mlp_layer_types(out)
    return out


class Glm4MoeLiteForCausalLM(DeepseekV3ForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        hf = glm4_moe_lite_config(args.hf)
        rms_norm_eps, context = float(hf["rms_norm_eps"]), context_length(hf)
        super().__init__(replace(args, hf=hf, rms_norm_eps=rms_norm_eps, max_position_embeddings=context))
