"""The mixture-of-experts settings of a config.json, under the names each family gives them.

Plain Python on the config dict (no torch): the models build their layers from it, and `mopt inspect`
and the tuner's cost model count active parameters from it without building anything.
"""

from __future__ import annotations

from dataclasses import dataclass

EXPERT_SIZE_KEYS = {"Qwen3MoeForCausalLM": "moe_intermediate_size", "MixtralForCausalLM": "intermediate_size"}
"""Architectures with experts -> the config key of each expert's intermediate size."""


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


def moe_args_for(hf: dict) -> MoeArgs | None:
    """The experts of a config.json's architecture; None for a dense model."""
    arch = (hf.get("architectures") or [""])[0]
    if arch not in EXPERT_SIZE_KEYS:
        return None
    renormalize = arch == "MixtralForCausalLM" or bool(hf.get("norm_topk_prob", False))
    return MoeArgs.from_hf(hf, EXPERT_SIZE_KEYS[arch], renormalize)


def is_sparse_layer(hf: dict, layer_idx: int) -> bool:
    """Whether transformers gives this layer experts rather than a dense MLP: Qwen-MoE's
    `mlp_only_layers` and `decoder_sparse_step` ((layer + 1) % step == 0); every layer elsewhere."""
    step = hf.get("decoder_sparse_step", 1) or 1
    return layer_idx not in (hf.get("mlp_only_layers") or []) and (layer_idx + 1) % step == 0


def sparse_layers(hf: dict) -> list[int]:
    """Indices of the layers with experts; [] for a dense model."""
    if moe_args_for(hf) is None:
        return []
    return [i for i in range(int(hf["num_hidden_layers"])) if is_sparse_layer(hf, i)]
