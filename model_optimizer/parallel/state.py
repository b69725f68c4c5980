"""This process's place in the tensor-parallel group, and the collectives the layers call.

Each rank is its own process (parallel/worker.py). Layers read `get_tp()` when they are built to
size their shard, and call `all_reduce` / `all_gather` in forward. A process that never joined a
group (every single-device engine) sees rank 0 of size 1, where every collective returns its input
untouched: the layers run exactly as they did before tensor parallelism existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1

    def shard(self, total: int, what: str = "dimension") -> tuple[int, int]:
        """(start, length) of this rank's equal share of `total`; ValueError when it does not divide."""
        if total % self.size:
            raise ValueError(f"{what} of {total} does not divide by tensor_parallel_size {self.size}")
        length = total // self.size
        return self.rank * length, length

    def kv_heads(self, num_kv_heads: int) -> tuple[int, int]:
        """(first KV head, count) this rank holds: an equal share, or, with fewer KV heads than ranks,
        the one head its group of ranks shares (replicated, as each rank's query heads need it)."""
        if num_kv_heads >= self.size:
            return self.shard(num_kv_heads, "num_key_value_heads")
        if self.size % num_kv_heads:
            raise ValueError(
                f"tensor_parallel_size {self.size} is neither a divisor nor a multiple of num_key_value_heads {num_kv_heads}"
            )
        return self.rank * num_kv_heads // self.size, 1


_current = TensorParallel()


def get_tp() -> TensorParallel:
    return _current


def init_tensor_parallel(rank: int, size: int, init_method: str, device: torch.device) -> TensorParallel:
    """Join the group (NCCL on CUDA, gloo on the CPU) as `rank` of `size`; once per process."""
    global _current
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, init_method=init_method, world_size=size, rank=rank, **kwargs)
    _current = TensorParallel(rank, size)
    return _current


def destroy_tensor_parallel() -> None:
    global _current
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    _current = TensorParallel()


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum of `x` over the ranks, in place (inside CUDA graphs too)."""
    if _current.size == 1:
        return x
    import torch.distributed as dist

    dist.all_reduce(x)
    return x


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Every rank's `x` concatenated along `dim`, in rank order."""
    if _current.size == 1:
        return x
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(_current.size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=dim)


def broadcast(x: torch.Tensor, src: int = 0) -> torch.Tensor:
    """`x` of rank `src` on every rank, in place."""
    if _current.size == 1:
        return x
    import torch.distributed as dist

    dist.broadcast(x, src)
    return x


def min_over_ranks(value: int) -> int:
    """The smallest of every rank's `value` (each rank's KV-cache capacity, say)."""
    if _current.size == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())
