"""How a server of given settings divides its memory: the KV-cache tokens it will hold and the bytes it
takes, as the engine sizes them.

On a GPU the engine takes gpu_memory_utilization of the card and the memory plan (model/inspect/
memory_plan.py, the engine's own rule) says how many KV blocks remain after the weights and the
activation peak; on a CPU the server holds its weights, the kv_cache_memory it is given and its runtime.
Weight offload (`cpu_offload_gb` G, a knob for space files: `cpu_offload_gb: [0, 8, 16]`) keeps G GiB of
weights in host memory and gives the KV cache G GiB less two layers (the device slots they are copied
into); predictor.py charges every step the copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.optimizer.tune.model_cost import ModelCost

GIB = float(1 << 30)
CPU_RUNTIME_GIB = 0.5
"""A CPU server's resident memory beyond weights and KV cache (Python, torch): the refit corrects it."""
PLAN_SETTINGS = (
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "max_num_seqs",
    "block_size",
    "kv_cache_dtype",
    "max_model_len",
    "dtype",
    "tensor_parallel_size",
)
"""The settings the memory plan depends on: its cache key, and the EngineConfig fields it is made with."""


@dataclass
class ServerMemory:
    """The memory figures of one model on one device, for any settings."""

    cost: ModelCost
    hardware: Hardware
    config: dict | None = None
    """config.json: on a GPU the KV cache is sized by modelio's memory plan, the engine's own rule."""
    plans: dict[tuple, Any] = field(default_factory=dict, repr=False)
    """The memory plan's row by PLAN_SETTINGS values (None where no plan could be made)."""

    def kv_capacity(self, settings: dict, k_bytes: int) -> tuple[float, float]:
        """KV-cache tokens and the memory the server will hold (bytes), as the engine sizes them."""
        block = int(settings.get("block_size", 16))
        tp = int(settings.get("tensor_parallel_size", 1))
        freed = self.offload_freed(settings, tp)
        if settings.get("num_kv_blocks"):
            kv_bytes = settings["num_kv_blocks"] * block * k_bytes
        elif self.hardware.is_gpu:
            planned = self.planned_row(settings)
            if planned is not None and not freed:
                return planned.num_kv_blocks * block, self.budget_bytes(settings)
            if planned is not None:  # offloaded layers leave room: the plan's budget (maybe negative) grows
                tokens = max(planned.kv_budget_bytes + freed, 0) // (block * k_bytes) * block
                return tokens, self.budget_bytes(settings)
            kv_bytes = max(self.budget_bytes(settings) - self.cost.weight_bytes / tp + freed, 0)
        else:
            kv_bytes = int(settings.get("kv_cache_memory", 1 << 30))
        tokens = kv_bytes // (block * k_bytes) * block
        if self.hardware.is_gpu:
            return tokens, self.budget_bytes(settings)  # the engine takes its whole share
        return tokens, self.cost.weight_bytes + kv_bytes + CPU_RUNTIME_GIB * GIB

    def planned_row(self, settings: dict) -> Any:
        """The memory plan's FitRow (weights, the profile forward's activation peak, headroom: its KV budget
        and blocks), or None when the plan cannot be made (no config, or a model the registry does not know)."""
        if self.config is None:
            return None
        key = tuple(settings.get(n) for n in PLAN_SETTINGS)
        if key not in self.plans:
            self.plans[key] = self._plan_row(key)
        return self.plans[key]

    def _plan_row(self, key: tuple) -> Any:
        from model_optimizer.runtime.config import EngineConfig

        try:
            from model_optimizer.model.inspect.memory_plan import plan_memory
            from model_optimizer.model.inspect.plan_gpu import GpuMemory

            engine = EngineConfig(**{n: v for n, v in zip(PLAN_SETTINGS, key) if v is not None})
            gpu = GpuMemory(self.hardware.name, int(self.hardware.memory_gib * GIB))
            plan = plan_memory(self.config, gpu, engine)
            own = next(iter(plan.weight_bytes_by_format))  # the model dtype's row, or a pre-quantized format's
            return plan.row(own, engine.kv_cache_dtype)
        except Exception:  # no plan: fall back to the share minus the weights
            return None

    def offload_bytes(self, settings: dict, tp: int) -> float:
        """Weight bytes per GPU that cpu_offload_gb keeps in host memory: every step copies them back."""
        return min(float(settings.get("cpu_offload_gb") or 0) * GIB, self.cost.weight_bytes / tp)

    def offload_freed(self, settings: dict, tp: int) -> float:
        """GPU bytes offload frees: the offloaded layers less the two layer slots that take their place."""
        moved = self.offload_bytes(settings, tp)
        one_layer = self.cost.weight_bytes / tp / max(self.cost.num_layers, 1)
        return max(moved - 2 * one_layer, 0.0) if self.hardware.is_gpu else 0.0

    def budget_bytes(self, settings: dict) -> float:
        """The memory the server may take: its gpu_memory_utilization share of the GPU, or the CPU's memory."""
        if not self.hardware.is_gpu:
            return self.hardware.memory_gib * GIB
        return float(settings.get("gpu_memory_utilization", 0.9)) * self.hardware.memory_gib * GIB
