"""Zeroed int32 counters for kernels whose last program of a group finishes the group's work.

The quantized matmul's split-K (quant_kernels.py), `moe_routing.norm_route` and the sampling kernel
(sampling.py) store partial results, count themselves in with an atomic, and the last program of a
group (an output tile, a token row) adds the partials and resets the group's counter to zero, so the
next launch (a CUDA-graph replay included) finds it zero again. The counters must be zero before the
first launch; made inside a CUDA-graph capture, their zeroing would only happen at replay, so there
the callers get None and run their unfused path instead.
"""

from __future__ import annotations

import torch

from model_optimizer.runtime.kernels import aot


class Counters:
    """One zeroed counter buffer per device for one kernel, grown (outside captures) to what is asked."""

    def __init__(self, min_size: int) -> None:
        self.min_size = min_size
        self.by_device: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device, size: int) -> torch.Tensor | None:
        """At least `size` zeroed counters on `device`; None inside a CUDA-graph capture without enough."""
        counters = self.by_device.get(device)
        if counters is None or counters.numel() < size:
            if device.type == "cuda" and aot.capturing():
                return None
            grown = 2 * counters.numel() if counters is not None else 0
            counters = self.by_device[device] = torch.zeros(
                max(size, self.min_size, grown), dtype=torch.int32, device=device
            )
        return counters
