"""Only knobs that can matter on the device the trials run on: a study on a CPU searches no GPU settings.

On a CPU `gpu_memory_utilization` sizes nothing (kv_cache_memory does), `enforce_eager` changes nothing
(there are no CUDA graphs to skip), and an fp8 KV cache only adds conversions: trials that differ in
them measure the same server twice and rank noise. A study on the CPU leaves them out and says so.
A `--server-cmd` server runs where it runs: its space is left as given.
"""

from __future__ import annotations

from model_optimizer.optimizer.tune.space import SearchSpace

GPU_ONLY = {
    "gpu_memory_utilization": "the CPU's KV cache is sized by kv_cache_memory",
    "enforce_eager": "CUDA graphs exist only on a GPU; every CPU step runs eagerly",
    "one_shot_all_reduce": "a GPU collective",
}
GPU_ONLY_VALUES = {"kv_cache_dtype": ("fp8", "an fp8 KV cache saves GPU memory; on the CPU it only adds conversions")}


def trials_on_cpu(server_cmd: str | None, fixed: dict) -> bool:
    """Whether the study's `mopt serve` trials run on the CPU: --set device=cpu, or no GPU torch sees."""
    if server_cmd:
        return False
    if fixed.get("device") in ("cpu", "cuda"):
        return fixed["device"] == "cpu"
    import torch

    return not torch.cuda.is_available()


def fit_to_cpu(space: SearchSpace) -> list[str]:
    """Drop from `space`, in place, the knobs and values that cannot matter on a CPU; one note for each."""
    notes, kept = [], []
    for knob in space.knobs:
        if knob.name in GPU_ONLY:
            notes.append(f"{knob.name} ({GPU_ONLY[knob.name]})")
            continue
        value, why = GPU_ONLY_VALUES.get(knob.name, (None, ""))
        if knob.choices is not None and value in knob.choices:
            knob.choices = [c for c in knob.choices if c != value]
            notes.append(f"{knob.name} {value} ({why})")
            if len(knob.choices) <= 1:
                continue  # one value left: the setting is held, not searched
        kept.append(knob)
    space.knobs = kept
    return notes
