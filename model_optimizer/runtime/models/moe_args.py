"""The mixture-of-experts settings of a config.json, under the names each family gives them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeArgs:
    num_experts: int
    top_k: int
    intermediate_size: int
    """Each expert's intermediate size."""
    renormalize: bool
    """Divide the top-k weights by their sum (Mixtral always; Qwen3-MoE's `norm_topk_prob`)."""

    @classmethod
    def from_hf(cls, hf: dict, intermediate_key: str, renormalize: bool) -> MoeArgs:
        """ValueError naming the key when a setting is missing or not a positive integer; the expert count
        is `num_experts` or, as transformers 5 saves it, `num_local_experts`."""
        arch = (hf.get("architectures") or ["this model"])[0]
        num_experts = hf.get("num_experts") or hf.get("num_local_experts")
        values = {"num_experts": num_experts, "num_experts_per_tok": hf.get("num_experts_per_tok")}
        values[intermediate_key] = hf.get(intermediate_key)
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"config.json: {key!r} must be a positive integer for a {arch}, got {value!r}")
        if values["num_experts_per_tok"] > num_experts:
            raise ValueError(
                f"config.json: num_experts_per_tok {values['num_experts_per_tok']} exceeds the {num_experts} experts"
            )
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json: hidden_act {act!r} is not supported for {arch} experts; supported: silu")
        return cls(num_experts, values["num_experts_per_tok"], values[intermediate_key], renormalize)
