"""HostKVTier: a second prefix cache in host memory (`kv_offloading_size`), below the GPU's block pool.

When the block pool evicts a cached block (its hash registered, its request gone) to reuse it, the
block's KV is saved to a host slot under the same hash instead of being lost; a later prompt whose
prefix misses on the GPU but hits here gets a fresh GPU block loaded from the slot, and counts those
tokens as computed, as a GPU hit would. Block hashes are the pool's (chained, so a hit is a prefix).

This is bookkeeping only (no torch): each step's copies leave with its SchedulerOutput as `kv_saves`
(GPU block -> host slot) and `kv_loads` (host slot -> GPU block), and the runner performs them before
the step's forward, saves first: a block evicted and reloaded in one step is saved before it is overwritten.
Slots are reused least recently used first, never one a load of the same step still reads; one saved
earlier in the same step may be, so a step's saves can name a slot twice, and the later save is what the
slot holds (the runner copies only that one: runner/host_kv_cache.py).

Swap preemption (`preemption_mode` swap) borrows slots from the same memory: a preempted request's blocks
are saved to slots held under its id (out of the LRU order, so no prefix save takes them) and loaded
into fresh GPU blocks when it resumes; the slots are free again once that step's copies are taken.
"""

from __future__ import annotations

from collections import OrderedDict


class HostKVTier:
    def __init__(self, num_slots: int) -> None:
        if num_slots <= 0:
            raise ValueError(f"the host KV tier needs at least one block, got {num_slots}")
        self.num_slots = num_slots
        self.slots: OrderedDict[int, int] = OrderedDict()
        """Block hash -> host slot, least recently used first."""
        self.free_slots = list(range(num_slots - 1, -1, -1))
        self.saves: list[tuple[int, int]] = []
        self.loads: list[tuple[int, int]] = []
        self.pinned: set[int] = set()
        """Hashes this step loads from: their slots are not reused before the step's copies run."""
        self.released: list[int] = []
        """Slots of pinned hashes forgotten this step: free once the step's copies are taken."""
        self.swapped: dict[str, list[int]] = {}
        """Request id -> the slots holding its blocks, in block order, while it waits swapped out."""
        self.num_saved = 0
        self.num_loaded = 0
        self.num_swapped_out = 0
        """Blocks saved by swap preemptions."""
        self.num_swapped_in = 0
        """Blocks loaded back when swapped requests resumed."""

    def contains(self, block_hash: int) -> bool:
        return block_hash in self.slots

    def save(self, block_id: int, block_hash: int) -> None:
        """The pool evicts GPU block `block_id` holding `block_hash`: keep its KV in a host slot (if one is
        free or unpinned; else it is dropped, as without the tier)."""
        if block_hash in self.slots:
            self.slots.move_to_end(block_hash)  # the host copy is the same KV
            return
        slot = self._take_slot()
        if slot is None:
            return
        self.slots[block_hash] = slot
        self.saves.append((block_id, slot))
        self.num_saved += 1

    def pin(self, block_hashes: list[int]) -> None:
        """Hold these hashes' slots until this step's copies are taken (a load will read them)."""
        for block_hash in block_hashes:
            self.slots.move_to_end(block_hash)
            self.pinned.add(block_hash)

    def load(self, block_hash: int, block_id: int) -> None:
        """Copy the slot of `block_hash` into the fresh GPU block `block_id` this step."""
        self.slots.move_to_end(block_hash)
        self.loads.append((self.slots[block_hash], block_id))
        self.num_loaded += 1

    def forget(self, block_hashes: list[int]) -> None:
        """Drop these hashes (their KV is not to be trusted): their slots become free."""
        for block_hash in block_hashes:
            slot = self.slots.pop(block_hash, None)
            if slot is not None:  # a slot a load of this step reads is free only after the step's copies
                (self.released if block_hash in self.pinned else self.free_slots).append(slot)

    def swap_out(self, request_id: str, block_ids: list[int]) -> bool:
        """Save a preempted request's blocks to slots held for it; False (nothing done) when fewer slots than
        blocks are free or held only by unpinned prefix blocks (those are dropped to make room)."""
        num_takeable = len(self.free_slots) + sum(1 for h in self.slots if h not in self.pinned)
        if len(block_ids) > num_takeable:
            return False
        slots = [self._take_slot() for _ in block_ids]
        self.saves += zip(block_ids, slots)  # type: ignore[arg-type]
        self.swapped[request_id] = slots  # type: ignore[assignment]
        self.num_swapped_out += len(block_ids)
        return True

    def swap_in(self, request_id: str, block_ids: list[int]) -> None:
        """Load a swapped-out request's blocks into these fresh GPU blocks this step; its slots are free
        once this step's copies are taken."""
        slots = self.swapped.pop(request_id)
        self.loads += zip(slots, block_ids)
        self.released += slots
        self.num_swapped_in += len(slots)

    def drop_swapped(self, request_id: str) -> None:
        """A swapped-out request finished (aborted) before it resumed: its slots are free."""
        self.free_slots += self.swapped.pop(request_id, [])

    def take_copies(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(saves, loads) of this step, in the order they were decided; the tier starts the next step."""
        copies = (self.saves, self.loads)
        self.saves, self.loads, self.pinned = [], [], set()
        self.free_slots += self.released
        self.released = []
        return copies

    def _take_slot(self) -> int | None:
        if self.free_slots:
            return self.free_slots.pop()
        for block_hash in self.slots:  # least recently used first
            if block_hash not in self.pinned:
                return self.slots.pop(block_hash)
        return None
