"""Weight offload's rule (`cpu_offload_gb`) in plain numbers, without torch: which decoder layers go to
host memory for a budget of bytes, and what that frees on the device and puts back there.

One definition for three users: the engine (weight_offload.py packs and streams the layers the loader
chose with `choose_offloaded_layers`), the tuner's memory estimate (optimizer/tune/server_memory.py) and
`mopt inspect`'s offload advice (model/inspect/offload_plan.py). The last two apply it to the sizes the
engine itself gives each layer of the model built on the meta device (weight_offload.layer_sizes), so
what they predict is what the engine does, a refusal included.

The rule (weight_offload.py's docstring says why): whole layers, the fewest evenly spread ones whose
bytes reach the budget, a budget above all decoder layers' bytes refused; each offloaded layer's
tensors packed into one flat buffer, each tensor starting ALIGN-aligned; on the device, slots as large
as the largest packed layer take turns: two, or one when a single layer is offloaded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

ALIGN = 256
"""Byte alignment of every tensor in a packed layer (what CUDA allocations give, so kernels see the same)."""
MAX_SLOTS = 2
"""Device slots the offloaded layers take turns in: one being read by the forward, one being filled."""


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a multiple of ALIGN: where the next tensor of a packed layer may start."""
    return -(-nbytes // ALIGN) * ALIGN


def packed_bytes(tensor_bytes: Iterable[int]) -> int:
    """Bytes of one layer's flat buffer (host and device slot alike) holding tensors of these sizes."""
    return max(sum(aligned(n) for n in tensor_bytes), ALIGN)


def num_slots(num_offloaded: int) -> int:
    """Device slots for `num_offloaded` (> 0) offloaded layers."""
    return min(MAX_SLOTS, num_offloaded)


def spread_layers(num_layers: int, k: int) -> list[int]:
    """The k of `num_layers` layers spread evenly over the depth: layer (j + 1) * n // k - 1 for j < k."""
    return [(j + 1) * num_layers // k - 1 for j in range(k)]


def choose_offloaded_layers(layer_bytes: list[int], budget: int) -> list[int]:
    """Indices of the fewest evenly spread layers whose bytes reach `budget`; ValueError (naming the most
    the engine accepts) when the layers hold less."""
    total = sum(layer_bytes)
    if budget > total:
        raise ValueError(
            f"cpu_offload_gb asks for {budget / 2**30:.3g} GiB but the decoder layers hold {total / 2**30:.3g} GiB "
            f"on this device; offload at most {_gib_rounded_down(total)} GiB (0: off)"
        )
    n = len(layer_bytes)
    for k in range(1, n + 1):
        ids = spread_layers(n, k)
        if sum(layer_bytes[i] for i in ids) >= budget:
            return ids
    return list(range(n))


def _gib_rounded_down(nbytes: int) -> str:
    """`nbytes` (> 0) in GiB, rounded down (a value the engine accepts) to two decimals, or to the first
    significant digit below that: a small model's layers hold a few MiB, and "at most 0 GiB" would mean off."""
    gib = nbytes / 2**30
    digits = max(2, 1 - math.floor(math.log10(gib)))
    return f"{math.floor(gib * 10**digits) / 10**digits:g}"


@dataclass(frozen=True)
class LayerSize:
    """One decoder layer's bytes, as the engine sizes them before loading (weight_offload.layer_sizes)."""

    weight_bytes: int
    """Its weights (a quantized layer's codes and scales): what the choice of layers adds up."""
    packed_bytes: int
    """Its flat buffer: what one copy moves, and what a device slot must hold."""


@dataclass(frozen=True)
class OffloadChoice:
    """What offloading `layer_ids` does to one device's memory."""

    layer_ids: list[int]
    offloaded_bytes: int
    """The weights that stay in host memory instead of on the device."""
    host_bytes: int
    """Their packed buffers: what every forward copies to the device."""
    slot_bytes: int
    """One device slot: the largest packed layer offloaded."""
    num_slots: int

    @property
    def device_bytes(self) -> int:
        """What the slots take on the device (WeightOffloader.device_bytes)."""
        return self.slot_bytes * self.num_slots

    @property
    def freed_bytes(self) -> int:
        """Device bytes left for the KV cache beyond what the unoffloaded model leaves (may be negative)."""
        return self.offloaded_bytes - self.device_bytes


def offload_of(sizes: list[LayerSize], layer_ids: list[int]) -> OffloadChoice:
    """The memory figures of offloading `layer_ids` (not empty) of layers sized `sizes`."""
    return OffloadChoice(
        list(layer_ids),
        sum(sizes[i].weight_bytes for i in layer_ids),
        sum(sizes[i].packed_bytes for i in layer_ids),
        max(sizes[i].packed_bytes for i in layer_ids),
        num_slots(len(layer_ids)),
    )


def choose_offload(sizes: list[LayerSize], budget: int) -> OffloadChoice:
    """What the engine does for a cpu_offload_gb of `budget` bytes (> 0); its ValueError where it refuses."""
    return offload_of(sizes, choose_offloaded_layers([s.weight_bytes for s in sizes], budget))
