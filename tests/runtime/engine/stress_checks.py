"""What the exactness stress search (stress_harness.py) checks of a real engine's bookkeeping, between steps
and after a run (its outputs: stress_outputs.py).

Between steps: every KV block is either held (its reference count is the number of block tables holding it)
or free, never both and never lost; running requests hold the blocks their computed tokens need and the
runner's block-table row is the scheduler's; waiting ones hold none; the host tier's slots are each in
exactly one place. After a run: no request anywhere, every block free (prefix-cached ones evictable), and
the counters agree with the requests (preemptions, generated tokens). Each step as scheduled keeps within the
budget and max_num_seqs, and without chunked prefill a fresh prompt is computed whole.
"""

from __future__ import annotations

from collections import Counter


def kv_problems(core) -> list[str]:  # noqa: ANN001 - an EngineCore
    """Block accounting of the pool against the scheduler's block tables, and the runner's copy of them."""
    scheduler, kv = core.scheduler, core.kv_cache
    pool = kv.pool
    problems = []
    held: Counter[int] = Counter()
    objects = {}
    for table in kv.block_tables.values():
        for block in table:
            if objects.setdefault(block.block_id, block) is not block:
                problems.append(f"block {block.block_id}: two Block objects")
            held[block.block_id] += 1
    for block_id, count in held.items():
        if objects[block_id].ref_cnt != count:
            problems.append(f"block {block_id}: ref_cnt {objects[block_id].ref_cnt}, held by {count} tables")
        if block_id in pool.free_queue:
            problems.append(f"block {block_id}: held and in the free queue")
    for block_id, block in pool.free_queue.items():
        if block.ref_cnt != 0 or block.block_id != block_id:
            problems.append(f"free block {block_id}: ref_cnt {block.ref_cnt}")
    if len(held) + pool.num_free_blocks != pool.num_blocks:
        problems.append(f"{len(held)} held + {pool.num_free_blocks} free != {pool.num_blocks} blocks")
    for block_hash, block in pool.cached.items():
        if block.block_hash != block_hash:
            problems.append(f"cached block {block.block_id} under a hash it does not carry")
    running = {r.request_id for r in scheduler.running}
    if set(kv.block_tables) != running:
        problems.append(f"block tables {sorted(kv.block_tables)} but running {sorted(running)}")
    return problems + _request_problems(core) + _tier_problems(kv.host_tier)


def schedule_problems(scheduler, out) -> list[str]:  # noqa: ANN001 - a Scheduler and the SchedulerOutput it made
    """One step as scheduled: within the token budget and max_num_seqs, and without chunked prefill a fresh
    prompt computed whole in its first step."""
    config, problems = scheduler.config, []
    if out.total_num_scheduled_tokens > config.max_num_batched_tokens:
        problems.append(f"step {out.step_id}: {out.total_num_scheduled_tokens} tokens > the budget")
    if len(out.num_scheduled_tokens) > config.max_num_seqs:
        problems.append(f"step {out.step_id}: {len(out.num_scheduled_tokens)} requests > max_num_seqs")
    if any(n <= 0 for n in out.num_scheduled_tokens.values()):
        problems.append(f"step {out.step_id}: a request scheduled with no tokens: {out.num_scheduled_tokens}")
    for new in out.new_requests if not config.enable_chunked_prefill else ():
        request = scheduler.requests[new.request_id]
        if not request.num_preemptions and request.num_computed_tokens < request.num_prompt_tokens:
            problems.append(f"step {out.step_id}: {new.request_id}'s prompt split with chunked prefill off")
    return problems


def _request_problems(core) -> list[str]:  # noqa: ANN001
    scheduler, kv = core.scheduler, core.kv_cache
    problems = []
    if len(scheduler.running) > scheduler.config.max_num_seqs:
        problems.append(f"{len(scheduler.running)} running > max_num_seqs {scheduler.config.max_num_seqs}")
    batch = getattr(core.runner, "batch", None)
    for request in scheduler.running:
        table = kv.block_ids(request.request_id)
        if len(table) < kv.blocks_needed(request.num_computed_tokens):
            problems.append(f"{request.request_id}: {len(table)} blocks for {request.num_computed_tokens} tokens")
        state = batch.requests.get(request.request_id) if batch is not None else None
        if state is not None:
            row = batch.block_table[state.row, : batch.num_row_blocks[state.row]].tolist()
            if request.request_id in scheduler._trimmed:  # a speculative rollback: told with its next step
                row = row[: len(table)]
            if row != table:
                problems.append(f"{request.request_id}: runner row {row} != scheduler table {table}")
    for request in scheduler.waiting:
        if request.num_computed_tokens:
            problems.append(f"waiting {request.request_id} has {request.num_computed_tokens} computed tokens")
    return problems


def _tier_problems(tier) -> list[str]:  # noqa: ANN001 - a HostKVTier or None
    if tier is None:
        return []
    places = list(tier.free_slots) + list(tier.slots.values()) + list(tier.released)
    places += [slot for slots in tier.swapped.values() for slot in slots]
    if sorted(places) != list(range(tier.num_slots)):
        return [f"host slots misplaced: {sorted(Counter(places).items())} of {tier.num_slots}"]
    return []


def end_problems(core, children: list) -> list[str]:  # noqa: ANN001
    """After a run (`children`: every Request the core made): nothing left anywhere, counters consistent."""
    scheduler, kv = core.scheduler, core.kv_cache
    problems = []
    leftovers = {
        "waiting": scheduler.waiting,
        "running": scheduler.running,
        "requests": scheduler.requests,
        "order": scheduler._order,
        "sent blocks": scheduler._num_sent_blocks,
        "short waiting": scheduler._short_waiting,
        "block tables": kv.block_tables,
        "hashed blocks": kv.num_hashed_blocks,
        "groups": core.groups,
        "client_of": core.client_of,
    }
    problems += [f"{name} left: {value!r:.200}" for name, value in leftovers.items() if value]
    in_flight = {core._in_flight.scheduler_output.step_id} if core._in_flight is not None else set()
    if not set(scheduler._sampling) | set(scheduler._prompt_logprobs) <= in_flight:  # collected with the next step
        problems.append(f"steps never collected: {sorted(set(scheduler._sampling) - in_flight)}")
    if kv.pool.num_free_blocks != kv.pool.num_blocks:
        problems.append(f"{kv.pool.num_blocks - kv.pool.num_free_blocks} blocks not freed")
    if any(block.ref_cnt for block in kv.pool.cached.values()):
        problems.append("a prefix-cached block is still referenced")
    if kv.host_tier is not None and kv.host_tier.swapped:
        problems.append(f"swapped requests left in the host tier: {sorted(kv.host_tier.swapped)}")
    if scheduler.num_preemptions != sum(c.num_preemptions for c in children):
        problems.append(f"num_preemptions {scheduler.num_preemptions} != the requests' sum")
    if core.num_generation_tokens != sum(c.num_output_tokens for c in children):
        problems.append(f"num_generation_tokens {core.num_generation_tokens} != the requests' output tokens")
    if not all(c.finished for c in children):
        problems.append(f"unfinished requests: {[c.request_id for c in children if not c.finished]}")
    batch = getattr(core.runner, "batch", None)
    if batch is not None and not set(batch.requests) <= scheduler.finished_ids:
        problems.append(f"runner rows of {sorted(set(batch.requests) - scheduler.finished_ids)} never freed")
    return problems
