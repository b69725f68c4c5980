"""The multi-head latent attention (MLA) settings of a DeepSeek-V2/V3 or GLM-4.7-Flash config.json.

Plain Python on the config dict (no torch): the model builds its attention from it, and `mopt inspect`
and the tuner's cost model size the KV cache from it without building anything.

What MLA caches: each token's keys and values are one compressed vector of `kv_lora_rank` values
(after its RMSNorm) from which every head's no-rope key part and value are projected back up
(`kv_b_proj`), plus one rotated key part of `qk_rope_head_dim` values shared by all heads. So a layer
stores kv_lora_rank + qk_rope_head_dim values per token, where a full-head cache would store
2 x num_heads x head_dim (keys of qk_nope + qk_rope, values of v_head_dim).
"""

from __future__ import annotations

from dataclasses import dataclass

MLA_ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM")


@dataclass(frozen=True)
class MlaArgs:
    num_heads: int
    kv_lora_rank: int
    q_lora_rank: int | None
    """None: queries come from one full projection (DeepSeek-V2-Lite); else a low-rank pair with a norm."""
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values one layer caches per token: the compressed KV, then the rope key part."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def full_head_elements(self) -> int:
        """Values one layer would cache per token with every head's key and value (what MLA avoids)."""
        return self.num_heads * (self.qk_head_dim + self.v_head_dim)

    def activation_values(self, num_heads: int) -> int:
        """Values per token alive at the widest point of the absorbed attention (layers/mla.py) beyond a
        layer's (tokens, hidden) tensors, for `num_heads` heads: the queries and two latent rows, then
        either the absorbed queries with their latent part, or the latent outputs with the heads' values
        and their copy (what `mopt inspect`'s memory plan counts in its profile forward)."""
        lora = self.kv_lora_rank
        widest = max(lora + self.latent_dim, lora + 2 * self.v_head_dim)
        return 2 * self.latent_dim + num_heads * (self.qk_head_dim + widest)

    @classmethod
    def from_hf(cls, hf: dict) -> MlaArgs:
        """ValueError naming the key when a setting is missing or not a positive integer."""
        arch = (hf.get("architectures") or ["this model"])[0]
        keys = ("num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        for key in keys:
            value = hf.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"config.json: {key!r} must be a positive integer for a {arch}, got {value!r}")
        q_lora_rank = hf.get("q_lora_rank")
        if q_lora_rank is not None and (isinstance(q_lora_rank, bool) or not isinstance(q_lora_rank, int)):
            raise ValueError(f"config.json: 'q_lora_rank' must be null or a positive integer, got {q_lora_rank!r}")
        if hf["qk_rope_head_dim"] % 2:
            raise ValueError(
                f"config.json: 'qk_rope_head_dim' must be even (rotary pairs), got {hf['qk_rope_head_dim']}"
            )
        return cls(
            num_heads=hf["num_attention_heads"],
            kv_lora_rank=hf["kv_lora_rank"],
            q_lora_rank=q_lora_rank or None,
            qk_nope_head_dim=hf["qk_nope_head_dim"],
            qk_rope_head_dim=hf["qk_rope_head_dim"],
            v_head_dim=hf["v_head_dim"],
        )


def mla_args_for(hf: dict) -> MlaArgs | None:
    """The latent attention of a config.json's architecture; None for the other architectures."""
    if (hf.get("architectures") or [""])[0] not in MLA_ARCHITECTURES:
        return None
    return MlaArgs.from_hf(hf)
