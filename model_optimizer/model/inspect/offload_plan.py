"""Offload advice for the memory plan: when no sequence fits the GPU, how many GiB `--cpu-offload-gb`
must move to host memory, and what each step then pays to copy them back.

The engine's rules (runtime/runner/weight_offload.py): whole decoder layers leave the GPU, and two
device slots, each one layer large, come in their place (one slot when a single layer moves), so k
offloaded layers free (k - min(k, 2)) layers' bytes for the KV cache. Every forward copies all k
layers from host memory, so a decode step costs at least k layers' bytes / host-to-device bandwidth.

The bandwidth: 80% of the PCIe link in the GPU's datasheet (pinned copies reach 85-90% of it: 54.8
of 63 GB/s on an H200, benchmarks/results/doctor_h200.json), or DEFAULT_H2D_GBPS where the datasheet
names no link. `mopt doctor --bench` measures this machine's figure (h2d_pinned); pass it as h2d_gbps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model_optimizer.environment.knowledge import gpu_spec, pcie_gbps

DEFAULT_H2D_GBPS = 25.0
"""Host-to-device GB/s when the GPU's link is unknown: a PCIe 4.0 x16 link's pinned copies, conservatively."""
LINK_EFFICIENCY = 0.8
"""Share of the datasheet link a pinned copy is assumed to reach (conservative: 0.87 measured on an H200)."""


@dataclass
class OffloadAdvice:
    weight_format: str
    cpu_offload_gb: float | None
    """GiB to pass as --cpu-offload-gb (rounded up to 0.1); None: not even every layer offloaded fits."""
    num_layers: int
    """Decoder layers that move to host memory (of the model's num_layers)."""
    offloaded_bytes: int
    h2d_gbps: float
    h2d_source: str
    ms_per_step: float
    """Copy time each step (decode token or prefill chunk) pays at least: offloaded bytes / h2d_gbps."""


def host_to_device_gbps(gpu_name: str | None) -> tuple[float, str]:
    """(GB/s, where it comes from) for copies from pinned host memory to this GPU."""
    link = (gpu_spec(gpu_name) or {}).get("pcie") or {}
    usable = pcie_gbps(link.get("gen"), link.get("width"))
    if usable:
        return round(usable * LINK_EFFICIENCY, 1), f"{LINK_EFFICIENCY:.0%} of PCIe gen{link['gen']} x{link['width']}"
    return DEFAULT_H2D_GBPS, "default (no PCIe link in the datasheet)"


def layer_bytes(weight_bytes: int, non_layer_params: int, dtype_bytes: int, num_layers: int) -> int:
    """Bytes of one decoder layer in a format: the weights less embedding, lm_head and final norm (never
    quantized), shared by the layers."""
    return max(weight_bytes - non_layer_params * dtype_bytes, 0) // num_layers


def offload_advice(
    weight_format: str, missing_bytes: int, one_layer: int, num_layers: int, h2d: tuple[float, str]
) -> OffloadAdvice:
    """The fewest layers whose offload frees `missing_bytes` beyond the slots they need on the GPU."""
    gbps, source = h2d
    for k in range(1, num_layers + 1):
        if (k - min(k, 2)) * one_layer >= missing_bytes:
            moved = k * one_layer
            gib = -(-moved * 10 // 2**30) / 10  # round up to 0.1 GiB: the engine then offloads >= k layers
            return OffloadAdvice(weight_format, max(gib, 0.1), k, moved, gbps, source, moved / (gbps * 1e9) * 1e3)
    return OffloadAdvice(weight_format, None, num_layers, num_layers * one_layer, gbps, source, 0.0)


def advice_note(advice: OffloadAdvice, seq_len: int) -> str:
    if advice.cpu_offload_gb is None:
        return (
            f"{advice.weight_format} weights: no sequence of {seq_len:,} tokens fits even with every layer "
            "offloaded (the embedding, lm_head, two layer slots and activations stay on the GPU)"
        )
    return (
        f"{advice.weight_format} weights: --cpu-offload-gb {advice.cpu_offload_gb:g} keeps {advice.num_layers} "
        f"decoder layers ({advice.offloaded_bytes / 2**30:.1f} GiB) in host memory so one sequence of {seq_len:,} "
        f"fits; each step then copies them at {advice.h2d_gbps:g} GB/s ({advice.h2d_source}): about "
        f"{advice.ms_per_step:,.0f} ms per token at batch 1, the same for the whole batch"
    )


def offload_rows(plan: Any, config: dict, dtype_bytes: int, h2d_gbps: float | None = None) -> list[OffloadAdvice]:
    """Advice for each weight format of `plan` (memory_plan.MemoryPlan, which calls this, with a GPU) in which no sequence of plan.seq_len fits,
    with the model-dtype KV cache; `h2d_gbps` a measured figure (default: host_to_device_gbps)."""
    from model_optimizer.model.inspect.consumption import build_meta_model
    from model_optimizer.runtime.runner.weight_offload import decoder_layers

    short = [r for r in plan.fits if r.kv_cache_dtype == "auto" and r.num_sequences < 1]
    if not short or plan.gpu is None:
        return []
    model = build_meta_model(config, plan.dtype, plan.tensor_parallel_size, plan.expert_parallel)
    layers = decoder_layers(model)
    in_layers = sum(p.numel() for p in layers.parameters())
    h2d = (h2d_gbps, "given") if h2d_gbps else host_to_device_gbps(plan.gpu.name)
    block = plan.bytes_per_block["auto"]
    need = -(-plan.seq_len // (block // plan.kv_bytes_per_token["auto"])) * block
    advice = []
    for row in short:
        one = layer_bytes(row.weight_bytes, plan.num_params - in_layers, dtype_bytes, len(layers))
        advice.append(offload_advice(row.weight_format, need - row.kv_budget_bytes, one, len(layers), h2d))
    return advice
