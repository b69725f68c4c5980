"""HostKVCache: the host-memory side of the KV tier (`kv_offloading_size`): one host tensor per layer shaped
like the GPU cache with num_host_blocks blocks, and the copies engine/host_kv_tier.py decided for a step.

Saves (GPU block -> host slot) run first: every layer's blocks are gathered into a device staging
tensor and copied down straight into their host slots. Loads (host slot -> GPU block) copy the slots
up straight from host memory into a device staging tensor and scatter it into the blocks. All of it is
queued on the step's stream, so it is ordered after the steps that wrote the blocks and before the
forward that reads them, and a save never overtakes a load of the same slot: nothing waits for the
device. The host side is never gathered by the CPU: each run of consecutive slots is one
cudaMemcpyAsync per layer and plane from the page-locked buffer (host_memory.py); the H200 measured a
4k-token prefix loaded through a CPU gather into a staging buffer slower than recomputing it. Staging
goes in pieces of STAGING_BYTES. On the CPU, where there is no transfer to batch, each layer's blocks
are copied directly between two CPU tensors (tests switch the batched path on, with plain copies).
"""

from __future__ import annotations

import logging
import math

import torch

from model_optimizer.runtime.runner.host_memory import (
    PAGE,
    copy_device_to_host,
    copy_host_to_device,
    host_buffer,
    page_lock,
)

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
            page_lock(self, self.buffer, "kv_offloading_size")
        log.info("host KV tier: %d blocks (%.2f GiB) in host memory", num_blocks, self.buffer.numel() / 2**30)

    @torch.inference_mode()
    def apply(self, saves: list[tuple[int, int]], loads: list[tuple[int, int]]) -> None:
        """Run one step's copies: saves, then loads (engine/host_kv_tier.py decides them)."""
        step = max(1, STAGING_BYTES // self.block_bytes) if self.batched else max(len(saves), len(loads), 1)
        # in slot order: consecutive slots move as one copy per layer and plane (the tier hands slots out in
        # ascending order, but the GPU pool evicts by recency: a prefix's blocks are saved in any order).
        # A slot the tier filled twice this step keeps only its last save (the one its hash names): the CPU
        # copies a step's saves in one index_copy_, whose duplicate destinations race across threads
        last = {slot: (block, slot) for block, slot in saves}
        saves, loads = sorted(last.values(), key=lambda pair: pair[1]), sorted(loads)
        for i in range(0, len(saves), step):
            self._save([b for b, _ in saves[i : i + step]], [s for _, s in saves[i : i + step]])
        for i in range(0, len(loads), step):
            self._load([s for s, _ in loads[i : i + step]], [b for _, b in loads[i : i + step]])

    def _staging(self, num_blocks: int) -> torch.Tensor:
        """(layers, planes, num_blocks, ...) on the device for one piece of a step's blocks of every layer."""
        shape = list(self.host[0].shape)
        shape[1] = num_blocks
        return torch.empty([len(self.host), *shape], dtype=self.host[0].dtype, device=self.device)

    def _transfer(self, staged: torch.Tensor, slots: list[int], up: bool) -> None:
        """Each run of consecutive host slots to (up) or from its rows of `staged`, layer by layer."""
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        for first, row, length in _runs(slots):
            for host, layer in zip(self.host, staged):
                for plane in range(host.shape[0]):
                    h, d = host[plane, first : first + length], layer[plane, row : row + length]
                    if stream is None:
                        (d if up else h).copy_(h if up else d)
                    elif up:
                        copy_host_to_device(d, h, stream)
                    else:
                        copy_device_to_host(h, d, stream)

    def _save(self, block_ids: list[int], slots: list[int]) -> None:
        blocks = torch.tensor(block_ids, device=self.device)
        if not self.batched:
            host_slots = torch.tensor(slots)
            for cache, host in zip(self.kv_caches, self.host):
                host.index_copy_(1, host_slots, cache.index_select(1, blocks))
            return
        gathered = self._staging(len(block_ids))  # every layer's blocks, then straight into their host slots
        for cache, layer in zip(self.kv_caches, gathered):
            torch.index_select(cache, 1, blocks, out=layer)
        self._transfer(gathered, slots, up=False)

    def _load(self, slots: list[int], block_ids: list[int]) -> None:
        blocks = torch.tensor(block_ids, device=self.device)
        if not self.batched:
            host_slots = torch.tensor(slots)
            for cache, host in zip(self.kv_caches, self.host):
                cache.index_copy_(1, blocks, host.index_select(1, host_slots))
            return
        staged = self._staging(len(slots))  # straight up from the host slots, then into the blocks
        self._transfer(staged, slots, up=True)
        for cache, layer in zip(self.kv_caches, staged):
            cache.index_copy_(1, blocks, layer)


def _runs(slots: list[int]) -> list[tuple[int, int, int]]:
    """(first slot, row in `slots`, length) of each run of consecutive slots, in order."""
    runs: list[tuple[int, int, int]] = []
    for row, slot in enumerate(slots):
        if runs and slot == runs[-1][0] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((slot, row, 1))
    return runs
