"""Parameter census from the headers: counts and bytes by dtype and by module kind."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from model_optimizer.model.inspect.headers import TensorInfo
from model_optimizer.model.inspect.leftovers import classify

KINDS = ("embedding", "attention", "mlp", "norm", "lm_head", "other", "lora", "optimizer", "ema")


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
    if any(p in ("mlp", "feed_forward", "ffn") or p in ("gate_proj", "up_proj", "down_proj") for p in parts):
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
    """config.json ties lm_head to the embedding (a separate lm_head tensor is then ignored)."""
    lm_head_in_checkpoint: bool = False
    quantization_config: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def take_census(tensors: list[TensorInfo], config: dict) -> Census:
    census = Census(num_files=len({t.file for t in tensors}))
    census.tied_embeddings = bool(config.get("tie_word_embeddings", False))
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
    return census
