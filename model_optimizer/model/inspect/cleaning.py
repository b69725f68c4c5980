"""What `--fix` will make of a checkpoint, decided from names and shapes alone: which keys survive
under which names, and the config.json corrections. inspect checks the result against the engine
before anything is written, and fix.py applies exactly this."""

from __future__ import annotations

from model_optimizer.model.inspect.checkpoint import Checkpoint
from model_optimizer.model.inspect.headers import TensorInfo
from model_optimizer.model.inspect.leftovers import classify


def kept_tensors(checkpoint: Checkpoint) -> dict[str, TensorInfo]:
    """Cleaned name -> the tensor that supplies it; optimizer state, EMA copies and LoRA factors go.
    A name that two keys clean to (say `module.x` and `x`) is an error: we cannot tell which is live."""
    kept: dict[str, TensorInfo] = {}
    for info in checkpoint.tensors:
        key = classify(info.name)
        if key.kind != "weight" or key.clean is None:
            continue
        if key.clean in kept:
            raise ValueError(
                f"tensors {kept[key.clean].name!r} and {info.name!r} both become {key.clean!r} once cleaned"
            )
        kept[key.clean] = info
    return kept


def lora_pairs(checkpoint: Checkpoint) -> dict[str, tuple[TensorInfo | None, TensorInfo | None]]:
    """Cleaned weight name -> (lora_A, lora_B) tensors that adapt it."""
    pairs: dict[str, list[TensorInfo | None]] = {}
    for info in checkpoint.tensors:
        key = classify(info.name)
        if key.kind in ("lora_A", "lora_B") and key.clean:
            pairs.setdefault(key.clean, [None, None])[0 if key.kind == "lora_A" else 1] = info
    return {name: (a, b) for name, (a, b) in pairs.items()}


def check_lora(checkpoint: Checkpoint) -> None:
    """ValueError when a LoRA factor lacks its partner or its base weight, or the shapes do not chain."""
    kept = kept_tensors(checkpoint)
    for name, (a, b) in lora_pairs(checkpoint).items():
        if a is None or b is None:
            raise ValueError(
                f"LoRA for {name!r} has only {'lora_B' if a is None else 'lora_A'}: cannot merge half an adapter"
            )
        base = kept.get(name)
        if base is None:
            raise ValueError(f"LoRA adapts {name!r}, which the checkpoint does not hold")
        if (
            len(base.shape) != 2
            or b.shape[0] != base.shape[0]
            or a.shape[1] != base.shape[1]
            or a.shape[0] != b.shape[1]
        ):
            raise ValueError(
                f"LoRA for {name!r}: B {b.shape} @ A {a.shape} does not give the weight's shape {base.shape}"
            )


def clean_config(checkpoint: Checkpoint) -> dict:
    """config.json as --fix writes it (before dtype and token-id changes): vocab_size = embedding rows."""
    config = dict(checkpoint.config)
    embed = kept_tensors(checkpoint).get("model.embed_tokens.weight")
    if embed is not None and embed.shape and config.get("vocab_size") != embed.shape[0]:
        config["vocab_size"] = embed.shape[0]
    return config


def clean_keys(checkpoint: Checkpoint) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, info.shape) for name, info in kept_tensors(checkpoint).items()]
