"""What `--fix` will make of a checkpoint, decided from names and shapes alone: which keys survive
under which names (wrapper prefixes stripped; optimizer state, EMA copies, LoRA factors once merged, and
tensors no parameter takes dropped), and the config.json corrections. inspect checks the result against the engine
before anything is written, and fix.py applies exactly this."""

from __future__ import annotations

from model_optimizer.model.inspect.checkpoint import Checkpoint
from model_optimizer.model.inspect.headers import TensorInfo
from model_optimizer.model.inspect.leftovers import classify


def kept_tensors(checkpoint: Checkpoint) -> dict[str, TensorInfo]:
    """Cleaned name -> the tensor that supplies it: `cleaned_tensors` less the junk no parameter takes."""
    cleaned = cleaned_tensors(checkpoint)
    junk = set(junk_names(checkpoint, cleaned))
    return {name: info for name, info in cleaned.items() if name not in junk}


def junk_names(checkpoint: Checkpoint, cleaned: dict[str, TensorInfo] | None = None) -> list[str]:
    """Cleaned names the engine's model has no parameter for (an extra head, a probe, a stray buffer),
    when the model loads without them. When parameters are missing or misshapen too, the checkpoint is
    for another model or config.json is wrong: dropping tensors would not fix it, so nothing goes."""
    from model_optimizer.model.inspect.consumption import check_loading

    cleaned = cleaned_tensors(checkpoint) if cleaned is None else cleaned
    check = check_loading(_config_for(checkpoint, cleaned), [(n, i.shape) for n, i in cleaned.items()])
    if check.error or check.missing or check.misshapen:
        return []
    return check.unexpected


def cleaned_tensors(checkpoint: Checkpoint) -> dict[str, TensorInfo]:
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
    kept = cleaned_tensors(checkpoint)
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
    return _config_for(checkpoint, cleaned_tensors(checkpoint))


def _config_for(checkpoint: Checkpoint, cleaned: dict[str, TensorInfo]) -> dict:
    config = dict(checkpoint.config)
    embed = cleaned.get("model.embed_tokens.weight")
    if embed is not None and embed.shape and config.get("vocab_size") != embed.shape[0]:
        config["vocab_size"] = embed.shape[0]
    return config


def clean_keys(checkpoint: Checkpoint) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, info.shape) for name, info in kept_tensors(checkpoint).items()]
