"""The mixture-of-experts settings of a config.json, under the names each family gives them.

Plain Python on the config dict (no torch): the models build their layers from it, and `mopt inspect`
and the tuner's cost model count active parameters from it without building anything.
"""

from __future__ import annotations

from dataclasses import dataclass

EXPERT_SIZE_KEYS = {
    "Qwen3MoeForCausalLM": "moe_intermediate_size",
    "MixtralForCausalLM": "intermediate_size",
    "DeepseekV2ForCausalLM": "moe_intermediate_size",
    "DeepseekV3ForCausalLM": "moe_intermediate_size",
    "Glm4MoeForCausalLM": "moe_intermediate_size",
    "GptOssForCausalLM": "intermediate_size",
    "Glm4MoeLiteForCausalLM": "moe_intermediate_size",
}
"""Architectures with experts -> the config key of each expert's intermediate size."""
DEEPSEEK = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM")
"""Architectures with DeepSeek's router settings (GLM-4.5 and GLM-4.7-Flash route as DeepSeek-V3 does) and,
but for GLM-4.7-Flash (`mlp_layer_types`), its layer plan (dense first_k_dense_replace layers)."""
MLP_LAYER_TYPES = ("dense", "sparse")


@dataclass(frozen=True)
class MoeArgs:
    num_experts: int
    top_k: int
    intermediate_size: int
    """Each expert's intermediate size."""
    renormalize: bool
    """Divide the top-k weights by their sum (Mixtral always; Qwen3-MoE's and DeepSeek's `norm_topk_prob`)."""
    num_shared_experts: int = 0
    """Experts every token runs besides its top_k (DeepSeek's `n_shared_experts`): one dense MLP of
    num_shared_experts * intermediate_size."""

    @classmethod
    def from_hf(cls, hf: dict, intermediate_key: str, renormalize: bool) -> MoeArgs:
        """ValueError naming the key when a setting is missing or not a positive integer; the expert count
        is `num_experts`, `num_local_experts` (transformers 5) or `n_routed_experts` (DeepSeek)."""
        arch = (hf.get("architectures") or ["this model"])[0]
        num_experts = hf.get("num_experts") or hf.get("num_local_experts") or hf.get("n_routed_experts")
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
        shared = hf.get("n_shared_experts") or 0
        if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
            raise ValueError(f"config.json: 'n_shared_experts' must be a non-negative integer, got {shared!r}")
        return cls(num_experts, values["num_experts_per_tok"], values[intermediate_key], renormalize, shared)


def moe_args_for(hf: dict) -> MoeArgs | None:
    """The experts of a config.json's architecture; None for a dense model."""
    arch = (hf.get("architectures") or [""])[0]
    if arch not in EXPERT_SIZE_KEYS:
        return None
    # DeepSeek-V2's router ignores norm_topk_prob, as transformers 5's does (models/deepseek_moe.py)
    reads_norm = arch != "DeepseekV2ForCausalLM" and bool(hf.get("norm_topk_prob", False))
    return MoeArgs.from_hf(hf, EXPERT_SIZE_KEYS[arch], arch == "MixtralForCausalLM" or reads_norm)


def mlp_layer_types(hf: dict) -> list[str]:
    """GLM-4.7-Flash's plan, as transformers' Glm4MoeLiteConfig reads it: `mlp_layer_types`, one "dense" or
    "sparse" per layer, else a dense first layer and sparse ones after it (first_k_dense_replace is not read)."""
    num_layers = hf["num_hidden_layers"]
    types = hf.get("mlp_layer_types")
    if types is None:
        return ["dense"] + ["sparse"] * (num_layers - 1)
    if not isinstance(types, list) or len(types) != num_layers or any(t not in MLP_LAYER_TYPES for t in types):
        raise ValueError(
            f"config.json: 'mlp_layer_types' must list 'dense' or 'sparse' for each of the {num_layers} layers, "
            f"got {types!r}"
        )
    return types


def is_sparse_layer(hf: dict, layer_idx: int) -> bool:
    """Whether transformers gives this layer experts rather than a dense MLP: Qwen-MoE's
    `mlp_only_layers` and `decoder_sparse_step` ((layer + 1) % step == 0); GLM-4.7-Flash's
    `mlp_layer_types`; DeepSeek's layers from `first_k_dense_replace` on, every `moe_layer_freq`-th
    (DeepSeek's own code; transformers 5 reads no moe_layer_freq, and every published config has 1);
    every layer elsewhere."""
    arch = (hf.get("architectures") or [""])[0]
    if arch == "Glm4MoeLiteForCausalLM":
        return mlp_layer_types(hf)[layer_idx] == "sparse"
    if arch in DEEPSEEK:
        first = hf.get("first_k_dense_replace") or 0
        freq = (hf.get("moe_layer_freq") or 1) if arch.startswith("Deepseek") else 1  # GLM's code reads none
        return layer_idx >= first and layer_idx % freq == 0
    step = hf.get("decoder_sparse_step", 1) or 1
    return layer_idx not in (hf.get("mlp_only_layers") or []) and (layer_idx + 1) % step == 0


def sparse_layers(hf: dict) -> list[int]:
    """Indices of the layers with experts; [] for a dense model."""
    if moe_args_for(hf) is None:
        return []
    return [i for i in range(int(hf["num_hidden_layers"])) if is_sparse_layer(hf, i)]
