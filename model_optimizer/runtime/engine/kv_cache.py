"""KV-cache bookkeeping: the block pool and the per-request block tables (pure Python).

A block holds `block_size` tokens of keys and values for every layer. Blocks are reference
counted: siblings of an n > 1 request and requests with a common prefix point at the same blocks.
A full block gets a hash chained over all tokens before it, so equal prefixes have equal hashes.
Free blocks wait in one O(1) LRU queue (an OrderedDict is a doubly-linked list): a request frees
its blocks tail first, so a prompt's head blocks stay cached longest; allocation takes the front
of the queue and evicts whatever cached block sits there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from model_optimizer.runtime.engine.host_kv_tier import HostKVTier
from model_optimizer.runtime.engine.request import Request

NO_PARENT_HASH = 0x9E3779B97F4A7C15


def hash_block(parent_hash: int | None, token_ids: Iterable[int]) -> int:
    """Hash of a full block, chained over the hash of the block before it."""
    return hash((NO_PARENT_HASH if parent_hash is None else parent_hash, tuple(token_ids)))


def check_kv_capacity(num_blocks: int, block_size: int, max_model_len: int) -> None:
    """Refuse to start with a KV cache that cannot hold one request of max_model_len tokens.

    Such an engine would start and then refuse every request without max_tokens (they may run to the
    end of the context), which is a configuration error better reported once, at start-up.
    """
    capacity = num_blocks * block_size
    if capacity < max_model_len:
        needed = -(-max_model_len // block_size)
        raise ValueError(
            f"the KV cache holds {capacity} tokens ({num_blocks} blocks of {block_size}), fewer than "
            f"max_model_len ({max_model_len}), so a request of full length could never run. Lower "
            f"--max-model-len to {capacity} or less, or make the cache larger: raise --gpu-memory-utilization "
            f"(--kv-cache-memory on the CPU) or set --num-kv-blocks {needed} or more"
        )


@dataclass(eq=False)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    """Set while the block is registered in the prefix cache."""


class BlockPool:
    """Fixed set of blocks: an LRU free queue, reference counts and the hash -> block prefix cache."""

    def __init__(self, num_blocks: int, host_tier: HostKVTier | None = None) -> None:
        if num_blocks <= 0:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        self._num_blocks = num_blocks
        self._num_fresh = num_blocks
        """Blocks never handed out: ids num_blocks - _num_fresh ... num_blocks - 1, made at their first
        allocation (a large GPU holds ~10^5 blocks: making them all up front was a visible part of a warm
        start). They are the queue's front, ahead of every freed block, as if the queue had started with
        all ids in order."""
        self.free_queue: OrderedDict[int, Block] = OrderedDict()
        """Freed blocks, in eviction order (front first), behind the fresh ones."""
        self.cached: dict[int, Block] = {}
        self.host_tier = host_tier
        """Where evicted cached blocks go (engine/host_kv_tier.py); None: they are dropped."""

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self._num_fresh + len(self.free_queue)

    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, num_blocks: int) -> list[Block]:
        """Take blocks from the front of the free queue, evicting their cached contents."""
        if not self.can_allocate(num_blocks):
            raise RuntimeError(f"asked for {num_blocks} blocks with {self.num_free_blocks} free")
        fresh = min(num_blocks, self._num_fresh)
        first = self._num_blocks - self._num_fresh
        taken = [Block(block_id, ref_cnt=1) for block_id in range(first, first + fresh)]
        self._num_fresh -= fresh
        for _ in range(num_blocks - fresh):
            _, block = self.free_queue.popitem(last=False)
            if self.host_tier is not None and block.block_hash is not None:
                self.host_tier.save(block.block_id, block.block_hash)
            self._uncache(block)
            block.ref_cnt = 1
            taken.append(block)
        return taken

    def touch(self, blocks: Iterable[Block]) -> None:
        """Take another reference to blocks found in the cache or shared with a sibling."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_queue[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: Iterable[Block]) -> None:
        """Drop one reference to each block, in eviction order: the first freed is evicted first."""
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue[block.block_id] = block

    def lookup(self, block_hash: int) -> Block | None:
        return self.cached.get(block_hash)

    def forget(self, block_hashes: Iterable[int]) -> None:
        """Drop these hashes from the prefix cache; blocks still in use stay with their requests."""
        block_hashes = list(block_hashes)
        for block_hash in block_hashes:
            block = self.cached.get(block_hash)
            if block is not None:
                self._uncache(block)
        if self.host_tier is not None:
            self.host_tier.forget(block_hashes)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block no request holds (it stays free, now plain) and the whole host tier, so the
        next prompt misses; the hit counters go on. A held block keeps its hash: its request is still reading
        it, and a prompt that shares it may still hit it. Returns False when such blocks remain cached (requests
        are running); vLLM's returns False then too, having dropped nothing."""
        for block in [b for b in self.cached.values() if b.ref_cnt == 0]:
            self._uncache(block)
        if self.host_tier is not None:
            self.host_tier.forget(list(self.host_tier.slots))
        return not self.cached

    def cache(self, block: Block, block_hash: int) -> None:
        """Register a full block under its hash; a twin computed concurrently stays uncached."""
        if block.block_hash is None and block_hash not in self.cached:
            block.block_hash = block_hash
            self.cached[block_hash] = block

    def _uncache(self, block: Block) -> None:
        if block.block_hash is not None:
            del self.cached[block.block_hash]
            block.block_hash = None


@dataclass(frozen=True)
class HostHit:
    """A prefix block found in the host tier, not on the GPU: allocate_slots gives it a GPU block and a load."""

    block_hash: int


@dataclass
class PrefixCacheStats:
    queries: int = 0
    """Prompt tokens looked up in the prefix cache, once per request (when it is first admitted)."""
    hits: int = 0
    """Of those, tokens found cached."""
    host_hits: int = 0
    """Of the hits, tokens found in the host tier (kv_offloading_size) and loaded from it."""


@dataclass
class KVCacheManager:
    """Block tables of running requests on top of one BlockPool."""

    num_blocks: int
    block_size: int
    enable_prefix_caching: bool = True
    host_tier: HostKVTier | None = None
    """The host-memory tier below the pool (kv_offloading_size); None: off."""
    pool: BlockPool = field(init=False)
    block_tables: dict[str, list[Block]] = field(init=False, default_factory=dict)
    num_hashed_blocks: dict[str, int] = field(init=False, default_factory=dict)
    stats: PrefixCacheStats = field(init=False, default_factory=PrefixCacheStats)

    def __post_init__(self) -> None:
        self.pool = BlockPool(self.num_blocks, self.host_tier)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def computed_blocks(self, request: Request) -> list[Block]:
        """Blocks that already hold a prefix of this (waiting) request's tokens.

        Comes from the sibling it shares a prompt with, else from the prefix cache. The last token is
        always left to compute, since its logits are needed to sample. Counts nothing: a request
        waiting for blocks looks up again every step (see `count_lookup`). Nothing for a request that
        still owes prompt logprobs: it needs the logits of every prompt position.
        """
        if request.needs_prompt_logprobs:
            return []
        max_blocks = (request.num_tokens - 1) // self.block_size
        shared = self._sibling_blocks(request)
        if shared is not None:  # the prompt's full blocks the sibling has computed, never past them: there
            # they hold the sibling's own output (a preempted completion comes back with tokens of its own)
            sibling = request.share_prompt_with
            prompt = min(request.num_prompt_tokens, sibling.num_computed_tokens)  # type: ignore[union-attr]
            return shared[: min(max_blocks, prompt // self.block_size)]
        if not self.enable_prefix_caching:
            return []
        self._extend_hashes(request, max_blocks * self.block_size)
        hits: list = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        tier = self.host_tier
        for block_hash in request.block_hashes[len(hits) : max_blocks] if tier is not None else ():
            if not tier.contains(block_hash):
                break
            hits.append(HostHit(block_hash))  # the prefix goes on in host memory
        return hits

    def count_lookup(self, request: Request, computed: list[Block]) -> None:
        """Count the prefix-cache lookup that admitted `request` (the scheduler calls it once per request)."""
        if self.enable_prefix_caching and self._sibling_blocks(request) is None:
            self.stats.queries += request.num_tokens
            self.stats.hits += len(computed) * self.block_size
            self.stats.host_hits += sum(isinstance(h, HostHit) for h in computed) * self.block_size

    def _sibling_blocks(self, request: Request) -> list[Block] | None:
        """The blocks of the running sibling whose prompt this request shares, if any."""
        sibling = request.share_prompt_with
        return None if sibling is None else self.block_tables.get(sibling.request_id)

    def allocate_slots(self, request: Request, num_new_tokens: int, computed: list[Block] | None = None) -> bool:
        """Make room for `num_new_tokens` more tokens; False (and no change) when the pool is short."""
        table = self.block_tables.get(request.request_id, [])
        num_tokens = request.num_computed_tokens + num_new_tokens
        if not computed and num_tokens <= len(table) * self.block_size:  # decode inside the last block
            if (
                self.enable_prefix_caching
                and num_tokens // self.block_size > self.num_hashed_blocks[request.request_id]
            ):
                self._cache_full_blocks(request, table, num_tokens)
            return True
        computed = computed or []
        on_host = [h for h in computed if isinstance(h, HostHit)]
        on_gpu = computed[: len(computed) - len(on_host)]
        num_computed = request.num_computed_tokens + len(computed) * self.block_size
        num_new_blocks = self.blocks_needed(num_computed + num_new_tokens) - len(table) - len(computed)
        revived = sum(1 for b in on_gpu if b.ref_cnt == 0)  # cached-but-free blocks leave the free queue
        if not self.pool.can_allocate(num_new_blocks + revived + len(on_host)):
            return False
        self.pool.touch(on_gpu)
        table.extend(on_gpu)
        table.extend(self._load_from_host(on_host))
        table.extend(self.pool.allocate(max(num_new_blocks, 0)))
        self.block_tables[request.request_id] = table
        self.num_hashed_blocks.setdefault(request.request_id, len(computed))
        if self.enable_prefix_caching:
            self._cache_full_blocks(request, table, num_computed + num_new_tokens)
        return True

    def _load_from_host(self, hits: list[HostHit]) -> list[Block]:
        """Fresh GPU blocks for host-tier hits, each registered under its hash and loaded this step."""
        if not hits:
            return []
        tier = self.host_tier
        tier.pin([h.block_hash for h in hits])  # the evictions these allocations cause must not reuse them
        blocks = self.pool.allocate(len(hits))
        for block, hit in zip(blocks, hits):
            tier.load(hit.block_hash, block.block_id)
            self.pool.cache(block, hit.block_hash)
        return blocks

    def swap_out(self, request: Request) -> bool:
        """Copy the blocks of a request about to be preempted (its computed tokens) to the host tier, to be
        loaded back when it resumes (preemption_mode swap). False when the tier is off or has no room."""
        num_blocks = self.blocks_needed(request.num_computed_tokens)
        if self.host_tier is None or num_blocks == 0:
            return False
        return self.host_tier.swap_out(request.request_id, self.block_ids(request.request_id)[:num_blocks])

    def swap_in(self, request: Request, num_new_tokens: int) -> bool:
        """Fresh blocks for a swapped-out request's tokens and `num_new_tokens` more, its host copies loaded
        into the first of them this step; False (and no change) when the pool is short."""
        num_tokens = request.num_swapped_tokens + num_new_tokens
        if not self.pool.can_allocate(self.blocks_needed(num_tokens)):
            return False
        table = self.pool.allocate(self.blocks_needed(num_tokens))
        num_swapped_blocks = self.blocks_needed(request.num_swapped_tokens)
        self.host_tier.swap_in(request.request_id, [b.block_id for b in table[:num_swapped_blocks]])  # type: ignore[union-attr]
        self.block_tables[request.request_id] = table
        self.num_hashed_blocks[request.request_id] = 0
        if self.enable_prefix_caching:  # full blocks go back into the prefix cache (a twin cached meanwhile wins)
            self._cache_full_blocks(request, table, num_tokens)
        return True

    def drop_swapped(self, request: Request) -> None:
        """A swapped-out request finished before it resumed: free its host slots."""
        if self.host_tier is not None:
            self.host_tier.drop_swapped(request.request_id)

    def free(self, request: Request) -> None:
        """Release a finished, aborted or preempted request's blocks at once."""
        table = self.block_tables.pop(request.request_id, [])
        self.num_hashed_blocks.pop(request.request_id, None)
        self.pool.free(reversed(table))

    def trim(self, request: Request) -> int:
        """Free the blocks past what the request's tokens need (a speculative rollback); returns how many
        it keeps. Those blocks hold only rejected proposals: they were never hashed."""
        table = self.block_tables.get(request.request_id, [])
        keep = self.blocks_needed(request.num_tokens)
        if len(table) > keep:
            extra = table[keep:]
            del table[keep:]
            self.pool.free(reversed(extra))
        return len(table)

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache of what no running request holds (BlockPool.reset_prefix_cache); True when
        nothing is left cached."""
        return self.pool.reset_prefix_cache()

    def forget(self, request: Request) -> None:
        """Take every full block of this request's tokens out of the prefix cache (its KV is not to be
        trusted), whether the request still holds the block, freed it at a preemption or found it cached."""
        self.pool.forget(request.block_hashes)

    def block_ids(self, request_id: str, start: int = 0) -> list[int]:
        """Block ids of a request's table from index `start` on."""
        return [b.block_id for b in self.block_tables.get(request_id, ())[start:]]

    def _cache_full_blocks(self, request: Request, table: list[Block], num_tokens: int) -> None:
        # a block whose last token is still being sampled is hashed at a later step, once its id is known
        num_full = min(num_tokens, request.num_tokens) // self.block_size
        start = self.num_hashed_blocks[request.request_id]
        if num_full <= start:
            return
        self._extend_hashes(request, num_full * self.block_size)
        for i in range(start, num_full):
            self.pool.cache(table[i], request.block_hashes[i])
        self.num_hashed_blocks[request.request_id] = num_full

    def _extend_hashes(self, request: Request, num_tokens: int) -> None:
        """Hash full blocks of the request's tokens up to `num_tokens`, continuing the chain."""
        hashes = request.block_hashes
        bs = self.block_size
        for i in range(len(hashes), num_tokens // bs):
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, request.token_ids_range(i * bs, (i + 1) * bs)))
