"""What tensor parallelism costs a step, and whether a candidate's tensor_parallel_size can run here.

Under tensor parallelism (parallel/) each of N GPUs reads 1/N of the weights and its share of the KV
cache, and every step adds collectives: one all-reduce after o_proj and one after down_proj in each
layer, one after the vocabulary-parallel embedding, one all-gather of the logits. Their cost is
latency, not bandwidth, at decode sizes (batch x hidden x 2 bytes), and a visible share of a TP step
(figures per message size and per step: README "Tensor parallelism", benchmarks/results/tp_h200x2/).
The engine sums with NCCL unless one_shot_all_reduce is set; then messages of up to max_num_seqs rows
take the one-shot kernel. Each is modelled as a line (latency + bytes / slope) through the points
benchmarks/tp.py allreduce measured; the study's refit scales them.
"""

from __future__ import annotations

import os

ONE_SHOT_US = (6.25, 150e3)
"""(fixed us, bytes per us) of the one-shot all-reduce on H200 NVLink, fitted to its 8 KB and 1 MB points in
benchmarks/results/tp_h200x2/nccl/allreduce.json (inside CUDA graphs)."""
NCCL_US = (12.9, 76e3)
"""(fixed us, bytes per us) of NCCL's all-reduce on H200 NVLink, fitted like ONE_SHOT_US to the same file."""
GLOO_US = (100.0, 1e3)
"""Processes on a CPU sum through gloo over shared memory: a rough prior the refit corrects."""


def collectives_per_step(num_layers: int) -> int:
    """Two all-reduces per layer, the embedding's all-reduce and the logits' all-gather."""
    return 2 * num_layers + 2


def all_reduce_us(num_bytes: float, one_shot: bool, is_gpu: bool = True) -> float:
    """One collective of `num_bytes` (us) by the lines above."""
    fixed, per_us = (ONE_SHOT_US if one_shot else NCCL_US) if is_gpu else GLOO_US
    return fixed + num_bytes / per_us


def step_collectives_ms(settings: dict, tokens: float, hidden_size: int, num_layers: int, is_gpu: bool) -> float:
    """All-reduce time (ms) of a step of `tokens` tokens; 0 on one GPU."""
    size = int(settings.get("tensor_parallel_size", 1))
    if size <= 1 or tokens <= 0:
        return 0.0
    one_shot = (
        is_gpu and settings.get("one_shot_all_reduce", False) and tokens <= int(settings.get("max_num_seqs", 256))
    )
    num_bytes = tokens * hidden_size * 2  # bf16 activations
    return collectives_per_step(num_layers) * all_reduce_us(num_bytes, one_shot, is_gpu) / 1e3


def local_kv_heads(num_kv_heads: int, size: int) -> int:
    """KV heads one GPU stores: its share, or one replicated head when fewer heads than GPUs (the
    engine's TensorParallel.kv_heads)."""
    from model_optimizer.runtime.distributed import TensorParallel

    return TensorParallel(0, size).kv_heads(num_kv_heads)[1]


def tensor_parallel_problem(size: int, shape: dict[str, int], num_gpus: int | None) -> str | None:
    """Why tensor_parallel_size `size` cannot run: more GPUs than visible, or a model the engine cannot
    split (`shape`: num_heads, num_kv_heads, intermediate_size); None when it can."""
    from model_optimizer.runtime.distributed import TensorParallel

    if size <= 1:
        return None
    if num_gpus is not None and size > num_gpus:
        return f"tensor_parallel_size {size} needs {size} GPUs; {num_gpus} visible"
    tp = TensorParallel(0, size)
    try:
        if shape.get("num_heads"):
            tp.shard(shape["num_heads"], "num_attention_heads")
            tp.kv_heads(shape["num_kv_heads"])
            tp.shard(shape["intermediate_size"], "intermediate_size")
    except ValueError as exc:
        return str(exc)
    return None


def visible_gpu_count() -> int | None:
    """GPUs this tuner's trials may use: CUDA_VISIBLE_DEVICES's entries when set, else what torch sees;
    None when unknown (no CUDA here: a study planned for a datasheet GPU)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is not None and raw.strip():
        return len([part for part in raw.split(",") if part.strip()])
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else None
    except Exception:  # no torch, no driver: unknown
        return None
