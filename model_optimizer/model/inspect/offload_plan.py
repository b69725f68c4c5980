"""Offload advice for the memory plan: when no sequence fits the GPU, how many GiB `--cpu-offload-gb`
must move to host memory, and what each step then pays to copy them back.

The engine's rule (runtime/runner/offload_rule.py, the one definition the engine and the tuner use too):
whole decoder layers, spread over the depth, leave the GPU until their bytes (as it estimates them)
reach --cpu-offload-gb, and two device slots, each as large as the largest of them packed, come in
their place (one slot when a single layer moves), so k offloaded layers free k layers' bytes less the
slots for the KV cache. Every forward copies all k packed layers from host memory, so a decode step
costs at least their bytes / host-to-device bandwidth. The advice sizes the layers with the engine's own
function on its model, prints a value at which the engine's choice is exactly the k layers it names,
and reports that choice's figures.

The bandwidth: 80% of the PCIe link in the GPU's datasheet (pinned copies reach 85-90% of it: 54.8
of 63 GB/s on an H200, benchmarks/results/doctor_h200.json), or DEFAULT_H2D_GBPS where the datasheet
names no link. `mopt doctor --bench` measures this machine's figure (h2d_pinned); pass it as h2d_gbps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from model_optimizer.environment.knowledge import gpu_spec, pcie_gbps
from model_optimizer.runtime.runner.offload_rule import (
    LayerSize,
    choose_offload,
    choose_offloaded_layers,
    spread_layers,
)

DEFAULT_H2D_GBPS = 25.0
"""Host-to-device GB/s when the GPU's link is unknown: a PCIe 4.0 x16 link's pinned copies, conservatively."""
LINK_EFFICIENCY = 0.8
"""Share of the datasheet link a pinned copy is assumed to reach (conservative: 0.87 measured on an H200)."""


@dataclass
class OffloadAdvice:
    weight_format: str
    cpu_offload_gb: float | None
    """GiB to pass as --cpu-offload-gb: the shortest value at which the engine's own choice
    (choose_offloaded_layers) is exactly these layers; None: not even every layer offloaded fits."""
    num_layers: int
    """Decoder layers that move to host memory (of the model's num_layers)."""
    offloaded_bytes: int
    """The weights of those layers: what leaves the GPU."""
    h2d_gbps: float
    h2d_source: str
    ms_per_step: float
    """Copy time each step (decode token or prefill chunk) pays at least: the layers' packed buffers / h2d_gbps."""


def host_to_device_gbps(gpu_name: str | None) -> tuple[float, str]:
    """(GB/s, where it comes from) for copies from pinned host memory to this GPU."""
    link = (gpu_spec(gpu_name) or {}).get("pcie") or {}
    usable = pcie_gbps(link.get("gen"), link.get("width"))
    if usable:
        return round(usable * LINK_EFFICIENCY, 1), f"{LINK_EFFICIENCY:.0%} of PCIe gen{link['gen']} x{link['width']}"
    return DEFAULT_H2D_GBPS, "default (no PCIe link in the datasheet)"


def engine_layer_sizes(
    config: dict, weight_format: str, dtype_name: str, tensor_parallel_size: int = 1, expert_parallel: bool = False
) -> list[LayerSize]:
    """Each decoder layer's sizes in `weight_format` on one GPU, as the engine sizes them for --cpu-offload-gb
    (weight_offload.layer_sizes on its model, quantized as it will be: loader.plan_offload adds up the same
    bytes), so the advice and the tuner work with the very numbers the engine's choice of layers does."""
    from model_optimizer.model.inspect.plan_formats import quantized_meta_model  # imports torch: not at module level
    from model_optimizer.runtime.runner.weight_offload import decoder_layers, layer_sizes

    model = quantized_meta_model(config, weight_format, dtype_name, tensor_parallel_size, expert_parallel)
    return layer_sizes(decoder_layers(model))


def offload_advice(
    weight_format: str, missing_bytes: int, sizes: list[LayerSize], h2d: tuple[float, str]
) -> OffloadAdvice:
    """The fewest layers, spread over the depth as the engine spreads them, whose offload frees
    `missing_bytes` beyond the slots they need on the GPU; `sizes`: each decoder layer's, as the engine
    sizes it (engine_layer_sizes). The figures are those of the engine's own choice at the value advised."""
    gbps, source = h2d
    weights = [s.weight_bytes for s in sizes]
    n = len(sizes)
    fewest = max(1, -(-missing_bytes // max(weights)))  # no layer frees more than its own bytes
    for k in range(fewest, n + 1):
        gib = offload_gib(weights, spread_layers(n, k))
        choice = choose_offload(sizes, int(gib * 2**30))
        if choice.freed_bytes >= missing_bytes:
            ms = choice.host_bytes / (gbps * 1e9) * 1e3
            return OffloadAdvice(weight_format, gib, len(choice.layer_ids), choice.offloaded_bytes, gbps, source, ms)
    return OffloadAdvice(weight_format, None, n, sum(weights), gbps, source, 0.0)


def offload_gib(layer_bytes: list[int], ids: list[int]) -> float:
    """The --cpu-offload-gb, with the fewest decimals, at which the engine offloads exactly the layers
    `ids`: the engine takes layers until their bytes reach the value, so one rounded up past those
    layers' bytes would take a layer more, and one past all layers' bytes is refused. Rounding down to
    the ninth decimal lands within two bytes of them."""
    moved = sum(layer_bytes[i] for i in ids)
    values = [math.floor(moved / 2**30 * 10**digits) / 10**digits for digits in range(1, 10)]
    exact = (v for v in values if v > 0 and choose_offloaded_layers(layer_bytes, int(v * 2**30)) == ids)
    return next(exact, values[-1])


def advice_note(advice: OffloadAdvice, seq_len: int) -> str:
    if advice.cpu_offload_gb is None:
        return (
            f"{advice.weight_format} weights: no sequence of {seq_len:,} tokens fits even with every layer "
            "offloaded (the embedding, lm_head, two layer slots and activations stay on the GPU)"
        )
    return (
        f"{advice.weight_format} weights: --cpu-offload-gb {advice.cpu_offload_gb} keeps {advice.num_layers} "
        f"decoder layers ({advice.offloaded_bytes / 2**30:.2f} GiB) in host memory so one sequence of {seq_len:,} "
        f"fits; each step then copies them at {advice.h2d_gbps:g} GB/s ({advice.h2d_source}): about "
        f"{advice.ms_per_step:,.0f} ms per token at batch 1, the same for the whole batch"
    )


def offload_rows(plan: Any, config: dict, h2d_gbps: float | None = None) -> list[OffloadAdvice]:
    """Advice for each weight format of `plan` (memory_plan.MemoryPlan, which calls this, with a GPU) in
    which no sequence of plan.seq_len fits, with the model-dtype KV cache; `h2d_gbps` a measured figure
    (default: host_to_device_gbps)."""
    short = [r for r in plan.fits if r.kv_cache_dtype == "auto" and r.num_sequences < 1]
    if not short or plan.gpu is None:
        return []
    h2d = (h2d_gbps, "given") if h2d_gbps else host_to_device_gbps(plan.gpu.name)
    block = plan.bytes_per_block["auto"]
    need = -(-plan.seq_len // (block // plan.kv_bytes_per_token["auto"])) * block
    split = (plan.dtype, plan.tensor_parallel_size, plan.expert_parallel)
    return [
        offload_advice(
            row.weight_format, need - row.kv_budget_bytes, engine_layer_sizes(config, row.weight_format, *split), h2d
        )
        for row in short
    ]
