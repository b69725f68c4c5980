"""Loading a model for the engine, phase by phase: the tokenizer, the model runner and what the engine core
must know of the model, with one log line per phase. `LLM` and the engine-core process of `mopt serve`
load a model through these same functions.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.core import ModelInfo
from model_optimizer.runtime.models.tokenizer import load_tokenizer

startup_log = logging.getLogger("model_optimizer.startup")
"""One INFO line per start-up phase with its time (here, in llm.py and in runner/model_runner.py), so a
user of `mopt serve` / `mopt generate` sees where the seconds before the first request go."""


def log_phase(name: str, since: float) -> float:
    """Log phase `name` as lasting from `since` (a perf_counter reading) to now; return now."""
    now = time.perf_counter()
    startup_log.info("start-up: %s %.2f s", name, now - since)
    return now


def eos_token_ids(model_dir: Path, tokenizer: Any) -> frozenset[int]:
    """The ids that end an output: generation_config.json's EOS ids (else config.json's, as transformers
    reads them) and the tokenizer's EOS, as vLLM stops on both (a chat fine-tune's tokenizer may end turns
    with <|im_end|> while its config still names </s>)."""
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                values = value if isinstance(value, list) else [value]  # true or "2" is no token id
                ids.update(v for v in values if isinstance(v, int) and not isinstance(v, bool))
                break
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    return frozenset(ids)


def engine_tokenizer(config: EngineConfig, model_dir: Path) -> Any:
    """The tokenizer for `config`: None with skip_tokenizer_init, or for dummy weights without one."""
    if config.skip_tokenizer_init:
        return None
    folder = Path(config.tokenizer) if config.tokenizer else model_dir
    return load_tokenizer(folder, required=config.load_format != "dummy")


def load_runner(config: EngineConfig, model_dir: Path, tokenizer: Any) -> tuple[Any, ModelInfo]:
    """The model runner for `config` (this process's ModelRunner, or the driver of tensor-parallel worker
    processes) and what the engine core needs to know of the model; the one way `LLM` and the engine-core
    process of `mopt serve` load a model."""
    from model_optimizer.runtime.runner.model_runner import ModelRunner

    check_host_memory(config)
    if config.tensor_parallel_size > 1:  # worker processes hold the model; this one drives them
        from model_optimizer.runtime.executor.executor import TensorParallelExecutor

        runner: Any = TensorParallelExecutor(config, model_dir)
    else:
        runner = ModelRunner(config, model_dir)
    info = ModelInfo(
        vocab_size=runner.vocab_size,
        max_model_len=runner.max_model_len,
        eos_token_ids=eos_token_ids(model_dir, tokenizer),
        num_kv_blocks=runner.num_kv_blocks,
        device_type=getattr(runner, "device_type", "cpu"),
        num_host_kv_blocks=getattr(runner, "num_host_kv_blocks", 0),
    )
    return runner, info


def check_host_memory(config: EngineConfig) -> None:
    """ValueError naming the flags when what the engine would allocate in host memory (the KV cache's
    kv_cache_memory per process on the CPU, the host KV tier's kv_offloading_size GiB, and on a GPU the
    offloaded layers' cpu_offload_gb GiB) exceeds what the machine has
    available: the zero-filled tensors got the process killed by the OOM killer, or a RuntimeError out of
    the allocator, only after the weights had loaded."""
    import torch

    from model_optimizer.environment.probes.system import available_memory_bytes
    from model_optimizer.runtime.units import format_size

    on_cpu = config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())
    kv = config.kv_cache_memory * config.tensor_parallel_size if on_cpu and config.num_kv_blocks is None else 0
    tier = int(config.kv_offloading_size * 2**30) * config.tensor_parallel_size
    # offloaded layers live in host memory on a GPU (on the CPU they are where they would be anyway)
    offload = 0 if on_cpu else int(config.cpu_offload_gb * 2**30) * config.tensor_parallel_size
    available = available_memory_bytes()
    if available is None or kv + tier + offload <= available:
        return
    parts = (
        ([f"--kv-cache-memory {format_size(config.kv_cache_memory)}"] if kv else [])
        + ([f"--kv-offloading-size {config.kv_offloading_size:g}"] if tier else [])
        + ([f"--cpu-offload-gb {config.cpu_offload_gb:g}"] if offload else [])
    )
    per_process = f" in each of {config.tensor_parallel_size} processes" if config.tensor_parallel_size > 1 else ""
    raise ValueError(
        f"{' and '.join(parts)}{per_process} would take {(kv + tier + offload) / 2**30:.1f} GiB of host memory, but only "
        f"{available / 2**30:.1f} GiB is available on this machine; lower {' and '.join(p.split()[0] for p in parts)}"
    )
