"""HostKVCache: the host-memory side of the KV tier (`kv_offloading_size`): one host tensor per layer shaped
like the GPU cache with num_host_blocks blocks, and the copies engine/host_kv_tier.py decided for a step.

Saves (GPU block -> host slot) run first and wait for the device: the blocks they read were written by
earlier steps, and the host copy must be complete before a later load may read it. Loads (host slot ->
GPU block) gather the slots on the host, copy them up from a page-locked staging buffer and scatter
them into their blocks on the step's stream, so the forward queued after them reads them. Either way
every layer's blocks travel together: one transfer per step and direction (per STAGING_BYTES), not one
per layer (one device sync for the saves instead of one per layer). On the CPU, where there is no transfer to batch, each layer's
blocks are copied directly between two CPU tensors.
"""

from __future__ import annotations

import logging
import math

import torch

from model_optimizer.runtime.runner.weight_offload import PAGE, host_buffer

log = logging.getLogger(__name__)

STAGING_BYTES = 64 << 20
"""Most bytes one batched transfer stages (on the device too, where the KV cache leaves little room):
a step saving or loading more goes in several transfers of this size."""


def _raw(tensor: torch.Tensor) -> torch.Tensor:
    """The same bytes as an integer tensor of the same element size (copies move bits, whatever the dtype)."""
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[tensor.element_size()])


class HostKVCache:
    def __init__(self, kv_caches: list[torch.Tensor], num_blocks: int, device: torch.device) -> None:
        shape = list(kv_caches[0].shape)
        shape[1] = num_blocks  # (planes, blocks, ...): the block dimension of kv_cache_shape
        self.num_blocks = num_blocks
        self.kv_caches = [_raw(cache) for cache in kv_caches]  # fp8 has no index_select on the CPU: copy bits
        self.device = device
        self.batched = device.type != "cpu"
        """Copy every layer's blocks in one transfer per step (on the CPU there is no transfer: each layer is
        copied in place, which saves a staging copy; tests switch it on to check the batched path)."""
        element = kv_caches[0].element_size()
        self.block_bytes = len(kv_caches) * math.prod(shape) // num_blocks * element
        """One block of every layer, in bytes."""
        layer_bytes = -(-math.prod(shape) * element // PAGE) * PAGE
        self.buffer = host_buffer(layer_bytes * len(kv_caches))
        self.host = [
            _raw(
                self.buffer[i * layer_bytes : i * layer_bytes + math.prod(shape) * element].view(kv_caches[0].dtype)
            ).view(shape)
            for i in range(len(kv_caches))
        ]
        if device.type == "cuda":
            from model_optimizer.runtime.runner.weight_offload import _page_lock

            _page_lock(self, self.buffer)
        log.info("host KV tier: %d blocks (%.2f GiB) in host memory", num_blocks, self.buffer.numel() / 2**30)

    @torch.inference_mode()
    def apply(self, saves: list[tuple[int, int]], loads: list[tuple[int, int]]) -> None:
        """Run one step's copies: saves, then loads (engine/host_kv_tier.py decides them)."""
        step = max(1, STAGING_BYTES // self.block_bytes) if self.batched else max(len(saves), len(loads), 1)
        for i in range(0, len(saves), step):
            self._save([b for b, _ in saves[i : i + step]], [s for _, s in saves[i : i + step]])
        for i in range(0, len(loads), step):
            self._load([s for s, _ in loads[i : i + step]], [b for _, b in loads[i : i + step]])

    def _staging(self, num_blocks: int, device: torch.device) -> torch.Tensor:
        """(layers, planes, num_blocks, ...) for one step's blocks of every layer; page-locked on the host
        (torch's caching host allocator: reused across steps, a block freed only after the copies reading it)."""
        shape = list(self.host[0].shape)
        shape[1] = num_blocks
        pinned = device.type == "cpu" and torch.cuda.is_available()
        return torch.empty([len(self.host), *shape], dtype=self.host[0].dtype, device=device, pin_memory=pinned)

    def _save(self, block_ids: list[int], slots: list[int]) -> None:
        blocks = torch.tensor(block_ids, device=self.device)
        host_slots = torch.tensor(slots)
        if not self.batched:
            for cache, host in zip(self.kv_caches, self.host):
                host.index_copy_(1, host_slots, cache.index_select(1, blocks))
            return
        # every layer's blocks gathered on the device, one transfer down (it waits for the device: the blocks
        # were written by earlier steps), scattered into their slots on the host
        gathered = self._staging(len(block_ids), self.device)
        for cache, layer in zip(self.kv_caches, gathered):
            torch.index_select(cache, 1, blocks, out=layer)
        staged = self._staging(len(block_ids), torch.device("cpu")).copy_(gathered)
        for host, layer in zip(self.host, staged):
            host.index_copy_(1, host_slots, layer)

    def _load(self, slots: list[int], block_ids: list[int]) -> None:
        host_slots = torch.tensor(slots)
        blocks = torch.tensor(block_ids, device=self.device)
        if not self.batched:
            for cache, host in zip(self.kv_caches, self.host):
                cache.index_copy_(1, blocks, host.index_select(1, host_slots))
            return
        # every layer's slots gathered on the host, one transfer up, scattered into their blocks on the
        # step's stream: the forward queued after reads them
        staged = self._staging(len(slots), torch.device("cpu"))
        for host, layer in zip(self.host, staged):
            torch.index_select(host, 1, host_slots, out=layer)
        on_device = staged.to(self.device, non_blocking=True)
        for cache, layer in zip(self.kv_caches, on_device):
            cache.index_copy_(1, blocks, layer)
