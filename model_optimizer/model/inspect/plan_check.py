"""Check the memory plan against the engine on a real GPU: plan first, then start the engine with
dummy weights and read the KV blocks it allocated (the number `mopt serve` logs as "KV cache: N
blocks"). Each measurement runs in its own process so no engine's memory leaks into the next.

    python -m model_optimizer.model.inspect.plan_check benchmarks/configs/qwen3-0.6b --utilization 0.5
    python -m model_optimizer.model.inspect.plan_check benchmarks/configs/llama-3.1-8b --tensor-parallel-size 2

Under tensor parallelism the plan is per GPU and the engine keeps the smallest of its ranks' block
counts; the live GPU read is GPU 0, before any worker starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def measure(
    config_dir: str,
    utilization: float,
    max_model_len: int,
    max_num_batched_tokens: int = 8192,
    tensor_parallel_size: int = 1,
) -> dict[str, Any]:
    """In this process: plan with the live GPU, then build the engine and compare (needs CUDA)."""
    from model_optimizer import LLM
    from model_optimizer.common.fileio import read_json
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_gpu import gpu_memory
    from model_optimizer.model.inspect.plan_shape import model_shape
    from model_optimizer.runtime.config import EngineConfig

    settings = dict(
        dtype="bfloat16",
        gpu_memory_utilization=utilization,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        enforce_eager=True,
        tensor_parallel_size=tensor_parallel_size,
    )
    config = read_json(Path(config_dir) / "config.json")
    gpu = gpu_memory("live")  # before the engine takes any memory, as the engine's own profile starts
    plan = plan_memory(config, gpu, EngineConfig(**settings))
    row = plan.row("bf16", "auto")
    llm = LLM(config_dir, load_format="dummy", **settings)
    measured = llm.runner.num_kv_blocks
    # the workers' runners live in their processes; the executor reports rank 0's blocks only
    block = llm.runner.bytes_per_block() if tensor_parallel_size == 1 else plan.bytes_per_block["auto"]
    llm.close()
    implied_peak = int(gpu.total_bytes * utilization) - measured * block  # within one block of the engine's peak
    shape = model_shape(config, "bfloat16", tensor_parallel_size)
    return {
        "config": config_dir,
        "gpu": gpu.name,
        "total_bytes": gpu.total_bytes,
        "free_bytes": gpu.free_bytes,
        "gpu_memory_utilization": utilization,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max_num_batched_tokens,
        "tensor_parallel_size": tensor_parallel_size,
        "planned_blocks": row.num_kv_blocks,
        "measured_blocks": measured,
        "relative_error": row.num_kv_blocks / measured - 1,
        "bytes_per_block": block,
        "planned_bytes_per_block": plan.bytes_per_block["auto"],
        "planned_activation_bytes": row.activation_bytes,
        "measured_activation_bytes": implied_peak - row.weight_bytes - shape.buffer_bytes,
        "weight_bytes": row.weight_bytes,
        "buffer_bytes": shape.buffer_bytes,
    }


def compare_with_engine(
    config_dir: str | Path,
    utilization: float,
    max_model_len: int,
    max_num_batched_tokens: int = 8192,
    timeout_s: float = 600,
    tensor_parallel_size: int = 1,
) -> dict[str, Any]:
    """`measure` in a fresh Python process; the result dict, or ValueError with the child's stderr tail."""
    cmd = [
        sys.executable,
        "-m",
        "model_optimizer.model.inspect.plan_check",
        str(config_dir),
        "--utilization",
        str(utilization),
        "--max-model-len",
        str(max_model_len),
        "--max-num-batched-tokens",
        str(max_num_batched_tokens),
        "--tensor-parallel-size",
        str(tensor_parallel_size),
    ]
    root = str(Path(__file__).resolve().parents[3])  # the child imports this source tree, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise ValueError(f"plan check of {config_dir} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m model_optimizer.model.inspect.plan_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config_dir")
    parser.add_argument("--utilization", type=float, default=0.9)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    args = parser.parse_args(argv)
    result = measure(
        args.config_dir, args.utilization, args.max_model_len, args.max_num_batched_tokens, args.tensor_parallel_size
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
