"""transformers' config defaults that a family's config.json may leave out and that size the model, in one
place for every reader: the engine's model classes, and the tuner's cost model, which reads config.json
without building anything (plain Python, no torch).

Filled only where a key is absent: a key set to null keeps its null (GLM-4.7-Flash's `q_lora_rank: null`
means a full q_proj, as in transformers).
"""

from __future__ import annotations

GLM4_MOE = {"norm_topk_prob": True, "n_shared_experts": 1, "first_k_dense_replace": 1}
"""transformers' Glm4MoeConfig values (GLM-4.5 to 4.7) where DeepSeek's differ."""
GLM4_MOE_LITE = {
    "q_lora_rank": 768,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "n_routed_experts": 64,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 1536,
    "n_shared_experts": 1,
    "routed_scaling_factor": 1.8,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 202752,
}
"""transformers' Glm4MoeLiteConfig values (GLM-4.7-Flash's own shapes) where DeepSeek's and DecoderArgs' differ."""
FAMILY_DEFAULTS = {"Glm4MoeForCausalLM": GLM4_MOE, "Glm4MoeLiteForCausalLM": GLM4_MOE_LITE}


def with_family_defaults(hf: dict, architecture: str | None = None) -> dict:
    """config.json with the FAMILY_DEFAULTS of `architecture` (default: its own) filled in where a key is absent."""
    defaults = FAMILY_DEFAULTS.get(architecture or (hf.get("architectures") or [""])[0], {})
    return {key: value for key, value in defaults.items() if key not in hf} | hf
