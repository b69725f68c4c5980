"""The runner's own copy of each running request, and the flat tensors of one step.

One description of a batch, in one place: each step's arrays (token ids, positions, slots,
lengths, offsets, block-table rows) are written into one persistent device buffer, at offsets that
depend only on the step's padded numbers of tokens and sequences (`_offsets`). A decode batch padded
to its bucket therefore lands on the very addresses its CUDA graph was captured on
(runner/decode_runner.py): the graph replays with no copy into buffers of its own. The host fills a
pinned staging buffer laid out the same way and one copy per step moves all of it.

Block tables live in one persistent array, a row per running request, updated with only the blocks
a step adds; a device copy of it is kept current with those additions (they travel in the same copy),
and each step gathers its rows on the device. Building a step thus costs the same however long the
sequences are, and the KV-cache tensors, which never change, are not part of it at all
(layers/attention.py binds them to the layers once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.layers.attention import AttentionMetadata
from model_optimizer.runtime.layers.sampler import SamplingInput
from model_optimizer.runtime.runner.prompt_logprobs import PromptJob, plan
from model_optimizer.runtime.sampling_params import SamplingParams

STEP_VIEWS_KEPT = 64
"""Step-buffer view sets `InputBatch` keeps (decode repeats a few; prefill shapes would grow it without end)."""


@dataclass
class CachedRequestState:
    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    params: SamplingParams
    row: int
    """Row of this request in the block-table array."""
    num_computed_tokens: int

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_ids(self, start: int, end: int) -> list[int]:
        num_prompt = len(self.prompt_token_ids)
        if start >= num_prompt:
            return self.output_token_ids[start - num_prompt : end - num_prompt]
        return self.prompt_token_ids[start:end] + self.output_token_ids[: max(end - num_prompt, 0)]

    def sampling_input(self, position: int) -> SamplingInput:
        return SamplingInput(self.params, self.prompt_token_ids, self.output_token_ids, position)


def _offsets(sizes: list[tuple[int, int]]) -> list[int]:
    """Byte offset of each (count, itemsize) array laid end to end, each 16-byte aligned, then the end.

    Triton and inductor specialise kernels on pointer alignment, so an unaligned array would compile a
    new kernel variant in the middle of a run."""
    offsets, end = [], 0
    for count, itemsize in sizes:
        offsets.append(end)
        end += -(-count * itemsize // 16) * 16
    offsets.append(end)
    return offsets


def _fixed_sizes(num_tokens: int, num_seqs: int) -> list[tuple[int, int]]:
    """token_ids, positions, slot_mapping (int64); seq_lens, query_start_loc, rows (int32): what a graph reads."""
    return [(num_tokens, 8)] * 3 + [(num_seqs, 4), (num_seqs + 1, 4), (num_seqs, 4)]


@dataclass
class StepInputs:
    """One step's flat inputs on the device (views of the step buffer): what the model reads, which rows sample."""

    token_ids: torch.Tensor
    """(num_tokens,) int64, padded rows included. Tokens still pending on the device are filled in by the runner."""
    positions: torch.Tensor
    """(num_tokens,) int64."""
    attn: AttentionMetadata
    """The batch's one description for attention (slots, offsets, lengths, block tables), padded rows included."""
    num_seqs: int
    """Sequences scheduled this step; a decode batch padded to a bucket has more rows (slot -1, length 1)."""
    sample_rows: torch.Tensor
    """Rows of the flat batch whose last token samples this step (one per sampling request)."""
    sample_rows_leading: bool
    """`sample_rows` is 0, 1, ..., n - 1 (a decode batch, every row sampling): a slice of the hidden
    states will do, no gather."""
    sample_states: list[CachedRequestState]
    sample_positions: list[int]
    """Index among its outputs of the token each sampling request draws."""
    pending_dst: torch.Tensor
    """Rows of token_ids whose id is still on the device, sampled by the previous step ..."""
    pending_src: torch.Tensor
    """... and where in that step's sampled ids each one is."""
    pending_in_order: bool = False
    """Row i of token_ids takes sampled id i for every pending token (steady decode): a plain copy will do."""
    prompt_jobs: list[PromptJob] | None = None
    """Prompt positions whose logprobs this step computes (runner/prompt_logprobs.py); None for most steps."""

    @property
    def num_padded_seqs(self) -> int:
        return self.attn.seq_lens.shape[0]


PendingTokens = dict[str, tuple[CachedRequestState, int]]
"""Request id -> (its state, row in the previous step's sampled ids) for tokens not yet on the host."""


class InputBatch:
    """Requests the runner holds, updated incrementally from each SchedulerOutput, and the step buffer."""

    def __init__(
        self,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        device: torch.device,
        max_num_batched_tokens: int = 8192,
    ) -> None:
        self.block_size = block_size
        self.device = device
        self.max_model_len = max_model_len
        self.requests: dict[str, CachedRequestState] = {}
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        self.block_table = np.zeros((max_num_seqs, self.max_blocks_per_seq), dtype=np.int32)
        self.num_row_blocks = np.zeros(max_num_seqs, dtype=np.int64)
        self.free_rows = list(range(max_num_seqs - 1, -1, -1))
        self.pad_sizes: list[int] = []
        """Decode batch sizes to pad to (the CUDA-graph buckets, set by the DecodeRunner); empty: no padding."""
        self.pad_query_lens: tuple[int, ...] = (1,)
        """Tokens per sequence of the batches padded like decode batches: 1, and with speculative decoding 1 + k
        (every sequence verifying k proposals, or a draft model catching up on them; set by the DecodeRunner)."""
        self.max_num_tokens = max(max_num_batched_tokens, max_num_seqs)
        self._new_block_index: list[int] = []
        self._new_block_ids: list[int] = []
        """Blocks added since the last step, as flat indices into the block table, for its device copy."""
        self._pinned = device.type == "cuda"
        self._staged = device.type != "cpu"
        """Whether each step is filled in host memory and copied over (on the CPU it is written in place)."""
        self._mirrored = device.type != "cpu"
        """Whether device_block_table is a copy to keep current (on the CPU it is the host table's memory)."""
        if self._mirrored:
            self.device_block_table = torch.zeros(self.block_table.shape, dtype=torch.int32, device=device)
        else:  # the same memory: every update is already there
            self.device_block_table = torch.from_numpy(self.block_table)
        self.block_tables = torch.zeros(self.block_table.shape, dtype=torch.int32, device=device)
        """Each step's block-table rows in batch order (gathered from device_block_table): what attention reads."""
        table_cells = self.block_table.size
        capacity = _offsets(
            _fixed_sizes(self.max_num_tokens, max_num_seqs) + [(max_num_seqs, 8)] * 3 + [(table_cells, 8)] * 2
        )[-1]
        self.buffer = torch.zeros(capacity, dtype=torch.uint8, device=device)
        """The step buffer: each step's arrays, at offsets fixed by its padded shape (`_offsets`)."""
        self._host = self.buffer.numpy() if not self._staged else None
        self._views: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}
        self._step_view_cache: dict[tuple, tuple[torch.Tensor, ...]] = {}
        self.prompt_logprob_ids: set[str] = set()
        """Requests whose prefill still reports prompt logprobs: while empty, a step does no work for them."""

    def update(self, out: SchedulerOutput) -> None:
        for request_id in out.finished_request_ids:
            state = self.requests.pop(request_id, None)
            if state is not None:
                self.free_rows.append(state.row)
                self.prompt_logprob_ids.discard(request_id)
        for new in out.new_requests:
            row = self.free_rows.pop()
            self.num_row_blocks[row] = 0
            self._append_blocks(row, new.block_ids)
            self.requests[new.request_id] = CachedRequestState(
                new.request_id,
                new.prompt_token_ids,
                list(new.output_token_ids),
                new.params,
                row,
                new.num_computed_tokens,
            )
            if new.prompt_logprobs:
                self.prompt_logprob_ids.add(new.request_id)
        for cached in out.cached_requests:
            state = self.requests[cached.request_id]
            if cached.num_kept_blocks is not None:  # a speculative rollback freed its last blocks
                self.num_row_blocks[state.row] = cached.num_kept_blocks
            if cached.new_block_ids:
                self._append_blocks(state.row, cached.new_block_ids)
            state.num_computed_tokens = cached.num_computed_tokens

    def _append_blocks(self, row: int, block_ids: list[int]) -> None:
        start = int(self.num_row_blocks[row])
        self.block_table[row, start : start + len(block_ids)] = block_ids
        self.num_row_blocks[row] = start + len(block_ids)
        if self._mirrored:
            first = row * self.max_blocks_per_seq + start
            self._new_block_index.extend(range(first, first + len(block_ids)))
            self._new_block_ids.extend(block_ids)

    def views(self, num_tokens: int, num_seqs: int) -> tuple[torch.Tensor, ...]:
        """token_ids, positions, slot_mapping, seq_lens, query_start_loc, rows and block_tables of a step
        of this padded shape: the same tensors (same addresses) for every step of that shape."""
        views = self._views.get((num_tokens, num_seqs))
        if views is None:
            sizes = _fixed_sizes(num_tokens, num_seqs)
            offsets = _offsets(sizes)
            dtypes = [torch.int64] * 3 + [torch.int32] * 3
            views = tuple(
                self.buffer[o : o + n * size].view(dtype) for o, (n, size), dtype in zip(offsets, sizes, dtypes)
            ) + (self.block_tables[:num_seqs],)
            if num_tokens in (q * num_seqs for q in self.pad_query_lens):  # decode shapes repeat; others rarely do
                self._views[(num_tokens, num_seqs)] = views
        return views

    def _step_views(self, offsets: tuple[int, ...], counts: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        """The step buffer's int64 arrays of sampled rows, pending destinations and sources and new
        block-table cells at these offsets; steady decode asks for the same ones step after step."""
        key = (offsets, counts)
        views = self._step_view_cache.get(key)
        if views is None:
            if len(self._step_view_cache) >= STEP_VIEWS_KEPT:
                self._step_view_cache.clear()  # prefills' shapes churn: start over rather than grow
            views = self._step_view_cache[key] = tuple(
                self.buffer[start : start + n * 8].view(torch.int64) for start, n in zip(offsets, counts)
            )
        return views

    @torch.inference_mode()
    def decode_views(self, size: int, query_len: int = 1) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """token_ids, positions and metadata of a batch of `size` sequences of `query_len` tokens (a decode
        batch when 1), all of them padding for now (slot -1, length query_len): what a CUDA graph of that
        shape is captured on."""
        token_ids, positions, slots, seq_lens, query_start_loc, rows, tables = self.views(size * query_len, size)
        token_ids.zero_()
        positions.zero_()
        slots.fill_(-1)
        seq_lens.fill_(query_len)
        query_start_loc.copy_(torch.arange(size + 1, dtype=torch.int32) * query_len)
        rows.zero_()
        meta = AttentionMetadata(
            slots, query_start_loc, seq_lens, tables, max_query_len=query_len, max_seq_len=self.max_model_len
        )
        return token_ids, positions, meta

    @torch.inference_mode()
    def prepare(self, out: SchedulerOutput, pending: PendingTokens) -> StepInputs:
        """Flat inputs of one step, written into the step buffer with one host-to-device copy."""
        states = [self.requests[rid] for rid in out.num_scheduled_tokens]
        num_seqs = len(states)
        nums = np.fromiter(out.num_scheduled_tokens.values(), dtype=np.int64, count=num_seqs)
        starts = np.fromiter((s.num_computed_tokens for s in states), dtype=np.int64, count=num_seqs)
        rows = np.fromiter((s.row for s in states), dtype=np.int64, count=num_seqs)
        ends = starts + nums
        token_ids: list[int] = []
        pending_dst: list[int] = []
        pending_src: list[int] = []
        spec = out.spec_token_ids
        for state, start, end in zip(states, starts.tolist(), ends.tolist()):
            known = state.num_tokens
            if end <= known:
                token_ids += state.token_ids(start, end)
                continue
            proposed = spec.get(state.request_id) if spec else None
            if proposed is not None and end == known + len(proposed):  # its last token, then the proposals
                token_ids += state.token_ids(start, known)
                token_ids += [max(t, 0) for t in proposed]  # a draft model's are filled in on the device
                continue
            entry = pending.get(state.request_id)
            if entry is None or entry[0] is not state or end != known + 1:
                raise RuntimeError(f"token {known} of request {state.request_id} is neither on the host nor pending")
            token_ids += state.token_ids(start, known)
            pending_dst.append(len(token_ids))
            pending_src.append(entry[1])
            token_ids.append(0)
        max_query_len = int(nums.max())
        padded = num_seqs
        if max_query_len == 1:  # decode-only batch: one token per sequence, padded to a graph bucket
            positions, token_rows = starts, rows
            padded = next((s for s in self.pad_sizes if s >= num_seqs), num_seqs)
        else:
            token_rows = np.repeat(rows, nums)
            positions = np.repeat(ends - nums.cumsum(), nums) + np.arange(nums.sum())
            if max_query_len in self.pad_query_lens and int(nums.min()) == max_query_len:  # 1 + k tokens each
                bucket = next((s for s in self.pad_sizes if s >= num_seqs), num_seqs)
                padded = bucket if bucket * max_query_len <= self.max_num_tokens else num_seqs
        num_tokens = len(token_ids)
        if num_tokens > self.max_num_tokens:
            raise RuntimeError(f"a step of {num_tokens} tokens exceeds the step buffer's {self.max_num_tokens}")
        bs = self.block_size
        slots = self.block_table[token_rows, positions // bs].astype(np.int64) * bs + positions % bs
        query_start_loc = np.concatenate(([0], nums.cumsum()))
        samples = np.fromiter(
            (rid in out.sampling_request_ids for rid in out.num_scheduled_tokens), dtype=bool, count=num_seqs
        )
        sample_states = [s for s, sample in zip(states, samples.tolist()) if sample]
        sample_positions = [int(e) - len(s.prompt_token_ids) for s, e in zip(sample_states, ends[samples].tolist())]
        sample_rows = query_start_loc[1:][samples] - 1
        new_index, new_ids = self._new_block_index, self._new_block_ids
        self._new_block_index, self._new_block_ids = [], []
        prompt_jobs = self._prompt_jobs(states, starts, ends, query_start_loc) if self.prompt_logprob_ids else None

        num_pad = padded - num_seqs
        tokens_padded = num_tokens + num_pad * max_query_len
        num_pending = len(pending_dst)
        sizes = _fixed_sizes(tokens_padded, padded) + [
            (len(sample_rows), 8),
            (num_pending, 8),
            (num_pending, 8),
            (len(new_index), 8),
            (len(new_ids), 4),
        ]
        offsets = _offsets(sizes)
        end = offsets[-1]
        if self._staged:
            staging = torch.empty(end, dtype=torch.uint8, pin_memory=self._pinned)
            host = staging.numpy()
        else:
            host = self._host[:end]
        h64, h32 = host.view(np.int64), host.view(np.int32)
        o = [x // size for x, (_, size) in zip(offsets, sizes)]  # in elements of each array's own type
        h64[o[0] : o[0] + num_tokens] = token_ids
        h64[o[1] : o[1] + num_tokens] = positions
        h64[o[2] : o[2] + num_tokens] = slots
        h32[o[3] : o[3] + num_seqs] = ends
        h32[o[4] : o[4] + num_seqs + 1] = query_start_loc
        h32[o[5] : o[5] + num_seqs] = rows
        if num_pad:  # padded rows: tokens that write nowhere (slot -1) and attend to as many slots
            h64[o[0] + num_tokens : o[0] + tokens_padded] = 0
            h64[o[1] + num_tokens : o[1] + tokens_padded] = 0
            h64[o[2] + num_tokens : o[2] + tokens_padded] = -1
            h32[o[3] + num_seqs : o[3] + padded] = max_query_len
            pad_ends = np.arange(num_tokens + max_query_len, tokens_padded + 1, max_query_len)
            h32[o[4] + num_seqs + 1 : o[4] + padded + 1] = pad_ends
            h32[o[5] + num_seqs : o[5] + padded] = 0
        h64[o[6] : o[6] + len(sample_rows)] = sample_rows
        h64[o[7] : o[7] + num_pending] = pending_dst
        h64[o[8] : o[8] + num_pending] = pending_src
        h64[o[9] : o[9] + len(new_index)] = new_index
        h32[o[10] : o[10] + len(new_ids)] = new_ids
        if self._staged:
            self.buffer[:end].copy_(staging, non_blocking=self._pinned)  # the pinned block stays alive until it has run
        tok, pos, slot, seq_lens, qsl, row_ids, tables = self.views(tokens_padded, padded)
        sample_dev, dst, src, index = self._step_views(tuple(offsets[6:10]), tuple(n for n, _ in sizes[6:10]))
        buf = self.buffer
        if new_index:
            ids = buf[offsets[10] : offsets[10] + len(new_ids) * 4].view(torch.int32)
            self.device_block_table.view(-1).index_copy_(0, index, ids)
        torch.index_select(self.device_block_table, 0, row_ids, out=tables)
        return StepInputs(
            token_ids=tok,
            positions=pos,
            attn=AttentionMetadata(
                slot_mapping=slot,
                query_start_loc=qsl,
                seq_lens=seq_lens,
                block_tables=tables,
                max_query_len=max_query_len,
                max_seq_len=int(ends.max()),
            ),
            num_seqs=num_seqs,
            sample_rows=sample_dev,
            sample_rows_leading=bool(len(sample_rows) == num_tokens and num_tokens == num_seqs),
            sample_states=sample_states,
            sample_positions=sample_positions,
            pending_dst=dst,
            pending_src=src,
            pending_in_order=pending_dst == pending_src == list(range(num_pending)),
            prompt_jobs=prompt_jobs,
        )

    def _prompt_jobs(
        self, states: list[CachedRequestState], starts: np.ndarray, ends: np.ndarray, query_start_loc: np.ndarray
    ) -> list[PromptJob]:
        """The prompt logprobs this step computes; a request leaves the set once its prompt is through."""
        jobs = []
        for i, state in enumerate(states):
            if state.request_id not in self.prompt_logprob_ids:
                continue
            start, end = int(starts[i]), int(ends[i])
            job = plan(
                state.request_id,
                state.prompt_token_ids,
                start,
                end,
                int(query_start_loc[i]),
                state.params.prompt_logprobs or 0,
            )
            if job is not None:
                jobs.append(job)
            if end >= len(state.prompt_token_ids) - 1:
                self.prompt_logprob_ids.discard(state.request_id)
        return jobs
