"""HostKVCache: the host-memory side of the KV tier (`kv_offloading_size`): one host tensor per layer shaped
like the GPU cache with num_host_blocks blocks, and the copies engine/host_kv_tier.py decided for a step.

Saves (GPU block -> host slot) run first and wait for the device: the blocks they read were written by
earlier steps, and the host copy must be complete before a later load may read it. Loads (host slot ->
GPU block) gather the slots on the host, copy them up in one transfer per layer from a page-locked
staging buffer and scatter them into their blocks on the step's stream, so the forward queued after
them reads them. On the CPU the same code copies between two CPU tensors.
"""

from __future__ import annotations

import logging
import math

import torch

from model_optimizer.runtime.runner.weight_offload import PAGE, host_buffer

log = logging.getLogger(__name__)


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
        element = kv_caches[0].element_size()
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
        if saves:
            blocks = torch.tensor([b for b, _ in saves], device=self.device)
            slots = torch.tensor([s for _, s in saves])
            for gpu, host in zip(self.kv_caches, self.host):
                host.index_copy_(1, slots, gpu.index_select(1, blocks).cpu())  # .cpu() waits for the device
        if loads:
            slots = torch.tensor([s for s, _ in loads])
            blocks = torch.tensor([b for _, b in loads], device=self.device)
            for gpu, host in zip(self.kv_caches, self.host):
                staged = host.index_select(1, slots)
                if self.device.type == "cuda":
                    staged = staged.pin_memory().to(self.device, non_blocking=True)
                gpu.index_copy_(1, blocks, staged)
