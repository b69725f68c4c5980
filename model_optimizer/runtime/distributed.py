"""This process's place in the tensor-parallel group, and the collectives the layers call.

Each rank is its own process (executor/worker.py). Layers read `get_tp()` when they are built to
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
    expert_parallel: bool = False
    """Mixture-of-experts layers place whole experts per rank (`experts`) instead of slicing each one."""

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

    def experts(self, num_experts: int) -> tuple[int, int]:
        """(first expert, count) this rank holds: all of them, or under expert parallelism its equal share."""
        if not self.expert_parallel:
            return 0, num_experts
        if num_experts % self.size:
            raise ValueError(
                f"expert parallelism needs the {num_experts} experts to divide by tensor_parallel_size {self.size}"
            )
        return self.shard(num_experts, "num_experts")


_current = TensorParallel()
_symmetric: tuple[torch.Tensor, str] | None = None
"""(buffer in symmetric GPU memory, group name) once `enable_one_shot_all_reduce` succeeded."""


def get_tp() -> TensorParallel:
    return _current


def init_tensor_parallel(
    rank: int, size: int, init_method: str, device: torch.device, expert_parallel: bool = False
) -> TensorParallel:
    """Join the group (NCCL on CUDA, gloo on the CPU) as `rank` of `size`; once per process."""
    global _current
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, init_method=init_method, world_size=size, rank=rank, **kwargs)
    _current = TensorParallel(rank, size, expert_parallel)
    return _current


def enable_one_shot_all_reduce(numel: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Sum messages of up to `numel` elements of `dtype` with a one-shot all-reduce over NVLink peer
    memory (torch's symmetric memory) instead of NCCL; False where it is unavailable.

    Decode messages are small (batch x hidden x 2 bytes) and latency-bound, where the one-shot kernel
    beats NCCL (benchmarks/tp.py allreduce; per message size in benchmarks/results/tp_h200x2/nccl/
    allreduce.json, README "Tensor parallelism"). Larger messages (prefill) keep NCCL. Opt-in
    (EngineConfig.one_shot_all_reduce): whole decode steps did not get faster.
    Collective: every rank calls it with the same arguments."""
    global _symmetric
    if _current.size == 1 or device.type != "cuda":
        return False
    import torch.distributed as dist

    try:
        import torch.distributed._symmetric_memory as symm_mem

        torch.ops.symm_mem.one_shot_all_reduce  # noqa: B018 - raises where the op is missing
    except (ImportError, AttributeError, RuntimeError):
        return False
    group = dist.group.WORLD.group_name
    buffer = symm_mem.empty(numel, dtype=dtype, device=device)
    symm_mem.rendezvous(buffer, group)
    _symmetric = (buffer, group)
    return True


def destroy_tensor_parallel() -> None:
    global _current, _symmetric
    _symmetric = None
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    _current = TensorParallel()


_symmetric: tuple[torch.Tensor, str] | None = None
"""(buffer in symmetric GPU memory, group name) once `enable_one_shot_all_reduce` succeeded."""


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum of `x` over the ranks (inside CUDA graphs too): in place through NCCL or gloo, or a new tensor
    from the one-shot kernel when the message fits its symmetric buffer. Use the returned tensor."""
    if _current.size == 1:
        return x
    if _symmetric is not None and x.is_cuda and x.dtype == _symmetric[0].dtype and x.numel() <= _symmetric[0].numel():
        staged = _symmetric[0][: x.numel()]
        staged.copy_(x.reshape(-1))
        return torch.ops.symm_mem.one_shot_all_reduce(staged, "sum", _symmetric[1]).view(x.shape)
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
