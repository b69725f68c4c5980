"""Parameter census from the headers: counts and bytes by dtype and by module kind, and by expert."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from model_optimizer.model.inspect.headers import TensorInfo
from model_optimizer.model.inspect.leftovers import classify

KINDS = ("embedding", "attention", "mlp", "experts", "router", "norm", "lm_head", "other", "lora", "optimizer", "ema")
MLP_PARTS = ("mlp", "feed_forward", "ffn", "block_sparse_moe")
ROUTER_MODULES = ("gate", "router", "shared_expert_gate")
"""The module of a mixture-of-experts block that scores the experts (`mlp.gate.weight`)."""
EXPERT_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\..*\.experts\.(\d+)\.")


def module_kind(name: str) -> str:
    """The kind of module a (cleaned) parameter name belongs to."""
    parts = name.split(".")
    if "lm_head" in parts or name.startswith("output."):
        return "lm_head"
    if any("norm" in p or p in ("ln_f", "ln_1", "ln_2") for p in parts[:-1]):
        return "norm"
    if any(p in ("embed_tokens", "wte", "word_embeddings", "embeddings", "tok_embeddings") for p in parts):
        return "embedding"
    if any(
        p in ("self_attn", "attn", "attention") or p in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
        for p in parts
    ):
        return "attention"
    if "experts" in parts[:-1]:
        return "experts"
    if any(p in MLP_PARTS for p in parts) and len(parts) > 1 and parts[-2] in ROUTER_MODULES:
        return "router"
    if any(p in MLP_PARTS or p in ("gate_proj", "up_proj", "down_proj") for p in parts):
        return "mlp"
    return "other"


def tensor_kind(info: TensorInfo) -> str:
    key = classify(info.name)
    if key.kind in ("optimizer", "ema"):
        return key.kind
    if key.kind.startswith("lora"):
        return "lora"
    return module_kind(key.clean or info.name)


@dataclass
class Tally:
    tensors: int = 0
    params: int = 0
    bytes: int = 0

    def add(self, info: TensorInfo) -> None:
        self.tensors += 1
        self.params += info.numel
        self.bytes += info.nbytes


@dataclass
class ExpertCensus:
    """The experts of a mixture of experts, counted per (layer, expert) from the tensor names."""

    num_experts: int
    """Distinct expert indices per layer (the most any layer has)."""
    num_moe_layers: int
    experts_per_token: int | None
    """config.json's num_experts_per_tok."""
    expert_params: int
    """Parameters of all experts of all layers."""
    params_per_expert: int
    """What most experts hold."""
    active_params: int | None
    """Parameters one token runs through: everything but the experts, plus experts_per_token of them
    per layer (None without num_experts_per_tok)."""
    odd_experts: list[str] = field(default_factory=list)
    """'layer L expert E: N params' for experts that hold another count than most (a broken checkpoint)."""


def expert_census(tensors: list[TensorInfo], total_params: int, config: dict) -> ExpertCensus | None:
    per_expert: Counter[tuple[int, int]] = Counter()
    for info in tensors:
        match = EXPERT_KEY.search(classify(info.name).clean or info.name)
        if match:
            per_expert[(int(match[1]), int(match[2]))] += info.numel
    if not per_expert:
        return None
    layers = Counter(layer for layer, _ in per_expert)
    usual = Counter(per_expert.values()).most_common(1)[0][0]
    num_experts, expert_params = max(layers.values()), sum(per_expert.values())
    top_k = config.get("num_experts_per_tok")
    active = None
    if isinstance(top_k, int) and 0 < top_k <= num_experts:
        active = total_params - expert_params + round(expert_params * top_k / num_experts)
    odd = [f"layer {layer} expert {e}: {n:,} params" for (layer, e), n in sorted(per_expert.items()) if n != usual]
    return ExpertCensus(num_experts, len(layers), top_k, expert_params, usual, active, odd[:10])


@dataclass
class Census:
    """What the checkpoint holds, from its headers alone."""

    num_files: int = 0
    total: Tally = field(default_factory=Tally)
    by_dtype: dict[str, Tally] = field(default_factory=dict)
    """dtype name (bfloat16, float32, ...) -> tally."""
    by_kind: dict[str, Tally] = field(default_factory=dict)
    """embedding, attention, mlp, norm, lm_head, other, and the leftovers lora, optimizer, ema."""
    dtypes_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    """kind -> dtype name -> parameters."""
    tied_embeddings: bool = False
    """The engine ties lm_head to the embedding (a separate lm_head tensor is then ignored)."""
    lm_head_in_checkpoint: bool = False
    quantization_config: dict[str, Any] | None = None
    experts: ExpertCensus | None = None
    """A mixture of experts' experts; None for a dense model."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def take_census(tensors: list[TensorInfo], config: dict, tied_embeddings: bool) -> Census:
    """The census of `tensors`; `tied_embeddings` is the engine's own flag (LoadCheck.tied_embeddings),
    not config.json's key, which a model may leave to its class's default (Gemma 3 ties without it)."""
    census = Census(num_files=len({t.file for t in tensors}), tied_embeddings=tied_embeddings)
    census.quantization_config = config.get("quantization_config")
    for info in tensors:
        kind = tensor_kind(info)
        census.total.add(info)
        census.by_dtype.setdefault(info.dtype_name, Tally()).add(info)
        census.by_kind.setdefault(kind, Tally()).add(info)
        per_dtype = census.dtypes_by_kind.setdefault(kind, {})
        per_dtype[info.dtype_name] = per_dtype.get(info.dtype_name, 0) + info.numel
        census.lm_head_in_checkpoint |= kind == "lm_head"
    census.by_kind = {k: census.by_kind[k] for k in KINDS if k in census.by_kind}
    census.experts = expert_census(tensors, census.total.params, config)
    return census
