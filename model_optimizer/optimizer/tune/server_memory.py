"""How a server of given settings divides its memory: the KV-cache tokens it will hold and the bytes it
takes, as the engine sizes them.

On a GPU the engine takes gpu_memory_utilization of the card and the memory plan (model/inspect/
memory_plan.py, the engine's own rule) says how many KV blocks remain after the weights and the
activation peak; on a CPU the server holds its weights, the kv_cache_memory it is given and its runtime.
Weight offload (`cpu_offload_gb` G, a knob for space files: `cpu_offload_gb: [0, 8, 16]`) follows the
engine's own rule (runtime/runner/offload_rule.py) on the engine's own sizes of each decoder layer (its
model built on the meta device, in the trial's dtype, quantization and tensor-parallel shard): whole
layers, the fewest evenly spread ones whose bytes reach G, leave the GPU, and one or two slots as large
as the largest of them come in their place; the KV cache gains the difference. A G above the decoder
layers' bytes is refused with the engine's message (offload_problem). predictor.py charges every step
the copy of the offloaded layers. Without config.json the layers are equal shares of the decoder's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.optimizer.tune.model_cost import ModelCost
from model_optimizer.runtime.runner.offload_rule import LayerSize, OffloadChoice, choose_offload

GIB = float(1 << 30)
CPU_RUNTIME_GIB = 0.5
"""A CPU server's resident memory beyond weights and KV cache (Python, torch): the refit corrects it."""
LAYER_SETTINGS = ("dtype", "quantization", "tensor_parallel_size", "enable_expert_parallel")
"""The settings the decoder layers' sizes (what weight offload moves) depend on."""
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
    layers: dict[tuple, list[LayerSize]] = field(default_factory=dict, repr=False)
    """The engine's sizes of the decoder layers on one GPU, by LAYER_SETTINGS values."""
    quantized: dict[tuple, float] = field(default_factory=dict, repr=False)
    """The whole model's weight bytes in a load-time quantization's format, by (format, dtype)."""

    def weight_bytes(self, settings: dict) -> float:
        """The whole model's weight bytes as the trial loads them: in the format its `quantization` rounds
        float weights to at load (the memory plan's row of that format: codes, scales, what stays in the model
        dtype), else as the checkpoint holds them (cost.weight_bytes)."""
        fmt = _load_format(settings)
        if fmt is None or self.config is None:
            return float(self.cost.weight_bytes)
        key = (fmt, settings.get("dtype"))
        if key not in self.quantized:
            self.quantized[key] = self._format_bytes(fmt, settings.get("dtype"))
        return self.quantized[key]

    def _format_bytes(self, fmt: str, dtype: str | None) -> float:
        from model_optimizer.model.inspect.memory_plan import plan_memory
        from model_optimizer.runtime.config import EngineConfig

        try:
            plan = plan_memory(self.config, None, EngineConfig(**({"dtype": dtype} if dtype else {})))
        except Exception:  # as _plan_row: a model the plan cannot size keeps the checkpoint's bytes
            return float(self.cost.weight_bytes)
        return float(plan.weight_bytes_by_format.get(fmt, self.cost.weight_bytes))  # refused: the engine says so

    def kv_capacity(self, settings: dict, k_bytes: int) -> tuple[float, float]:
        """KV-cache tokens and the memory the server will hold (bytes), as the engine sizes them."""
        block = int(settings.get("block_size", 16))
        tp = int(settings.get("tensor_parallel_size", 1))
        freed = self.offload_freed(settings)
        if settings.get("num_kv_blocks"):
            kv_bytes = settings["num_kv_blocks"] * block * k_bytes
        elif self.hardware.is_gpu:
            planned = self.planned_row(settings)
            if planned is not None and not freed:
                return planned.num_kv_blocks * block, self.budget_bytes(settings)
            if planned is not None:  # offloaded layers leave room: the plan's budget (maybe negative) grows
                tokens = max(planned.kv_budget_bytes + freed, 0) // (block * k_bytes) * block
                return tokens, self.budget_bytes(settings)
            kv_bytes = max(self.budget_bytes(settings) - self.weight_bytes(settings) / tp + freed, 0)
        else:
            kv_bytes = int(settings.get("kv_cache_memory", 1 << 30))
        tokens = kv_bytes // (block * k_bytes) * block
        if self.hardware.is_gpu:
            return tokens, self.budget_bytes(settings)  # the engine takes its whole share
        offload = self.offload(settings)  # on the CPU the slots come on top: host and device are one memory
        slots = offload.device_bytes if offload is not None else 0
        return tokens, self.weight_bytes(settings) + slots + kv_bytes + CPU_RUNTIME_GIB * GIB

    def planned_row(self, settings: dict) -> Any:
        """The memory plan's FitRow (weights in the trial's load-time quantization, the profile forward's
        activation peak, headroom: its KV budget and blocks), or None when the plan cannot be made (no config,
        or a model the registry does not know)."""
        if self.config is None:
            return None
        key = (*(settings.get(n) for n in PLAN_SETTINGS), _load_format(settings))
        if key not in self.plans:
            self.plans[key] = self._plan_row(key)
        return self.plans[key]

    def _plan_row(self, key: tuple) -> Any:
        from model_optimizer.runtime.config import EngineConfig

        *values, fmt = key
        try:
            from model_optimizer.model.inspect.memory_plan import plan_memory
            from model_optimizer.model.inspect.plan_gpu import GpuMemory

            engine = EngineConfig(**{n: v for n, v in zip(PLAN_SETTINGS, values) if v is not None})
            gpu = GpuMemory(self.hardware.name, int(self.hardware.memory_gib * GIB))
            plan = plan_memory(self.config, gpu, engine)
            own = next(iter(plan.weight_bytes_by_format))  # the model dtype's row, or a pre-quantized format's
            return plan.row(fmt if fmt in plan.weight_bytes_by_format else own, engine.kv_cache_dtype)
        except Exception:  # no plan: fall back to the share minus the weights
            return None

    def offload(self, settings: dict) -> OffloadChoice | None:
        """What cpu_offload_gb does to one GPU's memory, as the engine does it; None when it is off or the
        engine would refuse it (offload_problem)."""
        try:
            return self._offload(settings)
        except ValueError:
            return None

    def offload_problem(self, settings: dict) -> str | None:
        """The engine's refusal of the settings' cpu_offload_gb (more than the decoder layers hold), or None."""
        try:
            self._offload(settings)
        except ValueError as exc:
            return str(exc)
        return None

    def _offload(self, settings: dict) -> OffloadChoice | None:
        gib = float(settings.get("cpu_offload_gb") or 0)
        if not gib:
            return None
        return choose_offload(self.layer_sizes(settings), int(gib * 2**30))  # the loader's bytes, as it rounds

    def offload_bytes(self, settings: dict) -> float:
        """Bytes per GPU every step copies back from host memory: the offloaded layers' packed buffers."""
        offload = self.offload(settings)
        return float(offload.host_bytes) if offload is not None else 0.0

    def offload_freed(self, settings: dict) -> float:
        """GPU bytes offload leaves to the KV cache: the offloaded layers less the slots that take their
        place (negative when a small layer is moved beside a large one); 0 on a CPU, which has one memory."""
        offload = self.offload(settings)
        return float(offload.freed_bytes) if offload is not None and self.hardware.is_gpu else 0.0

    def layer_sizes(self, settings: dict) -> list[LayerSize]:
        """The decoder layers' sizes on one GPU as the engine gives them (model/inspect/offload_plan.py:
        its model on the meta device, in the dtype and quantization the trial runs); equal shares of the
        decoder's bytes when that model cannot be built (no config.json, an architecture it does not know)."""
        key = tuple(settings.get(n) for n in LAYER_SETTINGS)
        if key not in self.layers:
            self.layers[key] = self._engine_layer_sizes(settings) or self._equal_layer_sizes(settings)
        return self.layers[key]

    def _engine_layer_sizes(self, settings: dict) -> list[LayerSize] | None:
        if self.config is None:
            return None
        try:
            from model_optimizer.model.inspect.memory_plan import SHORT_DTYPES
            from model_optimizer.model.inspect.offload_plan import engine_layer_sizes

            dtype = self._dtype_name(settings)
            fmt = _load_format(settings) or SHORT_DTYPES[dtype]
            tp = int(settings.get("tensor_parallel_size", 1))
            expert_parallel = bool(settings.get("enable_expert_parallel")) and tp > 1
            return engine_layer_sizes(self.config, fmt, dtype, tp, expert_parallel)
        except Exception:  # as _plan_row: a model the engine cannot build here is sized by equal shares
            return None

    def _dtype_name(self, settings: dict) -> str:
        """The dtype the engine runs the trial in (the loader's one rule for `auto`, on this device)."""
        import torch

        from model_optimizer.runtime.models.loader import resolve_dtype
        from model_optimizer.runtime.models.model_config import DecoderArgs

        device = torch.device("cuda" if self.hardware.is_gpu else "cpu")
        dtype = resolve_dtype(settings.get("dtype") or "auto", DecoderArgs.from_dict(self.config), device)
        return str(dtype).removeprefix("torch.")

    def _equal_layer_sizes(self, settings: dict) -> list[LayerSize]:
        tp = int(settings.get("tensor_parallel_size", 1))
        n = max(self.cost.num_layers, 1)
        share = self.cost.layer_params / max(self.cost.num_params, 1)
        one = int(self.cost.weight_bytes * share / tp / n)
        return [LayerSize(one, one)] * n

    def budget_bytes(self, settings: dict) -> float:
        """The memory the server may take: its gpu_memory_utilization share of the GPU, or the CPU's memory."""
        if not self.hardware.is_gpu:
            return self.hardware.memory_gib * GIB
        return float(settings.get("gpu_memory_utilization", 0.9)) * self.hardware.memory_gib * GIB


def _load_format(settings: dict) -> str | None:
    """The weight format of the trial's `quantization` (fp8, int8, int4), or None when it quantizes nothing."""
    from model_optimizer.model.inspect.memory_plan import METHOD_FORMATS

    return METHOD_FORMATS.get(settings.get("quantization") or "")
