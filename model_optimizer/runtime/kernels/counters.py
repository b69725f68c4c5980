"""Zeroed int32 counters for kernels whose last program of a group finishes the group's work.

The quantized matmul's split-K (quant_kernels.py), `moe_routing.norm_route` and the sampling kernel
(sampling.py) store partial results, count themselves in with an atomic, and the last program of a
group (an output tile, a token row) adds the partials and resets the group's counter to zero, so the
next launch (a CUDA-graph replay included) finds it zero again. The counters must be zero before the
first launch; made inside a CUDA-graph capture, their zeroing would only happen at replay, so there
the callers get None and run their unfused path instead. A buffer that grows is replaced, not freed:
a graph captured on it still reads and resets it at every replay (the decode graphs' sampler, when an
eager call later asks for more rows, as a speculative step's verify rows may), and freed memory would
go to other tensors that the replays' atomics then write into.
"""

from __future__ import annotations

import torch

from model_optimizer.runtime.kernels import aot


class Counters:
    """One zeroed counter buffer per device for one kernel, grown (outside captures) to what is asked."""

    def __init__(self, min_size: int) -> None:
        self.min_size = min_size
        self.by_device: dict[torch.device, torch.Tensor] = {}
        self.replaced: list[torch.Tensor] = []
        """Buffers that grew: kept, since a captured graph may still use them (see the module docstring)."""

    def get(self, device: torch.device, size: int) -> torch.Tensor | None:
        """At least `size` zeroed counters on `device`; None inside a CUDA-graph capture without enough."""
        counters = self.by_device.get(device)
        if counters is None or counters.numel() < size:
            if device.type == "cuda" and aot.capturing():
                return None
            grown = 2 * counters.numel() if counters is not None else 0
            if counters is not None:
                self.replaced.append(counters)
            counters = self.by_device[device] = torch.zeros(
                max(size, self.min_size, grown), dtype=torch.int32, device=device
            )
        return counters
