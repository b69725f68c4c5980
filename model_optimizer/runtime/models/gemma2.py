"""Gemma 2 (`Gemma2ForCausalLM`, model_type gemma2: 2B, 9B, 27B): Gemma 3's text model (models/gemma3.py)
with these differences, each as transformers' Gemma2 computes it:
- no RMSNorm on each head's queries and keys;
- one RoPE (`rope_theta`, or transformers 5's `rope_parameters`) for sliding and global layers alike;
- without `layer_types`, layers alternate: even-indexed ones sliding (`sliding_window`), odd ones global
  (Gemma2Config's default; `sliding_window_pattern` is not read, as transformers does not read it);
- attention scores soft-capped by `attn_logit_softcapping` (50; null: not capped, as transformers
  reads it), after the query_pre_attn_scalar scaling and before the mask (the attention layer and its
  kernels do it); logits by `final_logit_softcapping` (30), as Gemma 3's.
"""

from __future__ import annotations

from model_optimizer.runtime.layers.rotary import RopeConfig
from model_optimizer.runtime.models.gemma3 import LAYER_TYPES, Gemma3ForCausalLM, GemmaLayout, layer_types
from model_optimizer.runtime.models.model_config import DecoderArgs

GLOBAL_EVERY = 2
"""Gemma2Config's default placement: every second layer global."""


class Gemma2ForCausalLM(Gemma3ForCausalLM):
    family = "Gemma 2"
    caps_attention = True

    @staticmethod
    def layout(args: DecoderArgs) -> GemmaLayout:
        """Layers from `layer_types` or alternating, one RoPE for both types, no q/k norms, capped scores."""
        rope = RopeConfig.from_hf(args.hf, args.head_dim, args.max_position_embeddings)
        types = layer_types(args.hf, args.num_layers, GLOBAL_EVERY)
        cap = args.hf.get("attn_logit_softcapping")
        softcap = None if cap is None else float(cap)
        return GemmaLayout(types, dict.fromkeys(LAYER_TYPES, rope), qk_norm=False, softcap=softcap)
