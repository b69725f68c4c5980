"""Training leftovers in tensor names: wrapper prefixes, optimizer state, EMA copies, LoRA adapters.

`classify(name)` says what a checkpoint key is and what the engine would call it once cleaned;
the findings report it and `--fix` applies it, so the two can never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WRAPPER_PREFIXES = ("_orig_mod.", "module.", "base_model.model.")
"""torch.compile, DistributedDataParallel / DataParallel, and PEFT's wrapper, at the front of a name."""
OPTIMIZER_PARTS = {
    "optimizer",
    "optimizer_state",
    "optim_state",
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "momentum_buffer",
}
EMA_FIRST_PARTS = {"ema", "ema_model", "model_ema", "ema_state", "shadow_params"}
LORA = re.compile(r"^(?P<base>.+)\.lora_(?P<which>A|B)(?:\.[A-Za-z0-9_]+)?\.weight$")
"""`<module>.lora_A.weight` or PEFT's `<module>.lora_A.<adapter>.weight`."""


@dataclass(frozen=True)
class KeyClass:
    """What a checkpoint key holds."""

    kind: str
    """weight, optimizer, ema, lora_A or lora_B."""
    clean: str | None
    """weight: the name without wrapper prefixes; lora_*: the name of the weight it adapts."""
    prefixes: tuple[str, ...] = ()
    """Wrapper prefixes that were removed (also `model.model.` collapsed, and `.base_layer`)."""


def strip_wrappers(name: str) -> tuple[str, tuple[str, ...]]:
    """The name without wrapper prefixes, and the prefixes removed, in order."""
    removed: list[str] = []
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
                removed.append(prefix)
        if "._orig_mod." in name:  # a compiled submodule
            name, changed = name.replace("._orig_mod.", "."), True
            removed.append("._orig_mod.")
        if name.startswith("model.model."):  # a causal-LM wrapper saved around another
            name, changed = name[len("model.") :], True
            removed.append("model.model.")
    if ".base_layer." in name:  # PEFT keeps the frozen weight under base_layer
        name = name.replace(".base_layer.", ".")
        removed.append(".base_layer.")
    return name, tuple(removed)


def classify(name: str) -> KeyClass:
    parts = name.split(".")
    if OPTIMIZER_PARTS.intersection(parts) or name.endswith(".step") and parts[0].startswith("optim"):
        return KeyClass("optimizer", None)
    if parts[0] in EMA_FIRST_PARTS or "ema" in parts[1:2] and parts[0] in ("module", "_orig_mod"):
        return KeyClass("ema", None)
    clean, prefixes = strip_wrappers(name)
    lora = LORA.match(clean)
    if lora:
        return KeyClass(f"lora_{lora['which']}", f"{lora['base']}.weight", prefixes)
    return KeyClass("weight", clean, prefixes)
