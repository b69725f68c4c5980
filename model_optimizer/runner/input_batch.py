"""The runner's own copy of each running request, and the flat tensors of one step.

Block tables live in one persistent array, a row per running request, updated with only the
blocks a step adds, so building a step costs the same however long the sequences are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.engine.scheduler_output import SchedulerOutput
from model_optimizer.host_to_device import to_device_packed
from model_optimizer.layers.attention import AttentionMetadata
from model_optimizer.layers.sampler import SamplingInput
from model_optimizer.sampling_params import SamplingParams


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


@dataclass
class StepInputs:
    """One step's flat inputs on the device: what the model reads, and which rows sample."""

    token_ids: torch.Tensor
    """(num_tokens,) int64. Tokens still pending on the device are filled in by the runner."""
    positions: torch.Tensor
    """(num_tokens,) int64."""
    attn: AttentionMetadata
    """The batch's one description for attention (slots, offsets, lengths, block tables, the caches)."""
    sample_rows: torch.Tensor
    """Rows of the flat batch whose last token samples this step (one per sampling request)."""
    sample_states: list[CachedRequestState]
    sample_positions: list[int]
    """Index among its outputs of the token each sampling request draws."""
    pending_dst: torch.Tensor
    """Rows of token_ids whose id is still on the device, sampled by the previous step ..."""
    pending_src: torch.Tensor
    """... and where in that step's sampled ids each one is."""

    @property
    def num_seqs(self) -> int:
        return self.attn.seq_lens.shape[0]


PendingTokens = dict[str, tuple[CachedRequestState, int]]
"""Request id -> (its state, row in the previous step's sampled ids) for tokens not yet on the host."""


class InputBatch:
    """Requests the runner holds, updated incrementally from each SchedulerOutput."""

    def __init__(
        self,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        device: torch.device,
        kv_caches: list[torch.Tensor] | None = None,
    ) -> None:
        self.block_size = block_size
        self.device = device
        self.kv_caches = kv_caches if kv_caches is not None else []
        """The KV-cache tensors (one per layer): the same every step, passed along in each step's metadata."""
        self.requests: dict[str, CachedRequestState] = {}
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        self.block_table = np.zeros((max_num_seqs, self.max_blocks_per_seq), dtype=np.int32)
        self.num_row_blocks = np.zeros(max_num_seqs, dtype=np.int64)
        self.free_rows = list(range(max_num_seqs - 1, -1, -1))

    def update(self, out: SchedulerOutput) -> None:
        for request_id in out.finished_request_ids:
            state = self.requests.pop(request_id, None)
            if state is not None:
                self.free_rows.append(state.row)
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
        for cached in out.cached_requests:
            state = self.requests[cached.request_id]
            if cached.new_block_ids:
                self._append_blocks(state.row, cached.new_block_ids)
            state.num_computed_tokens = cached.num_computed_tokens

    def _append_blocks(self, row: int, block_ids: list[int]) -> None:
        start = self.num_row_blocks[row]
        self.block_table[row, start : start + len(block_ids)] = block_ids
        self.num_row_blocks[row] = start + len(block_ids)

    def prepare(self, out: SchedulerOutput, pending: PendingTokens) -> StepInputs:
        """Flat inputs of one step, copied to the device in two transfers (model_optimizer/host_to_device.py)."""
        states = [self.requests[rid] for rid in out.num_scheduled_tokens]
        nums = np.fromiter(out.num_scheduled_tokens.values(), dtype=np.int64, count=len(states))
        starts = np.fromiter((s.num_computed_tokens for s in states), dtype=np.int64, count=len(states))
        rows = np.fromiter((s.row for s in states), dtype=np.int64, count=len(states))
        ends = starts + nums
        token_ids: list[int] = []
        pending_dst: list[int] = []
        pending_src: list[int] = []
        for state, start, end in zip(states, starts.tolist(), ends.tolist()):
            known = state.num_tokens
            if end <= known:
                token_ids += state.token_ids(start, end)
                continue
            entry = pending.get(state.request_id)
            if entry is None or entry[0] is not state or end != known + 1:
                raise RuntimeError(f"token {known} of request {state.request_id} is neither on the host nor pending")
            token_ids += state.token_ids(start, known)
            pending_dst.append(len(token_ids))
            pending_src.append(entry[1])
            token_ids.append(0)
        if nums.max() == 1:  # decode-only batch: one token per sequence
            positions, token_rows = starts, rows
        else:
            token_rows = np.repeat(rows, nums)
            positions = np.repeat(ends - nums.cumsum(), nums) + np.arange(nums.sum())
        bs = self.block_size
        slots = self.block_table[token_rows, positions // bs].astype(np.int64) * bs + positions % bs
        query_start_loc = np.concatenate(([0], nums.cumsum()))
        max_blocks = int(-(-ends.max() // bs))
        samples = np.fromiter(
            (rid in out.sampling_request_ids for rid in out.num_scheduled_tokens), dtype=bool, count=len(states)
        )
        sample_states = [s for s, sample in zip(states, samples.tolist()) if sample]
        sample_positions = [int(e) - len(s.prompt_token_ids) for s, e in zip(sample_states, ends[samples].tolist())]
        num_seqs = len(states)
        tok, pos, slot, sample_rows, dst, src = to_device_packed(
            [token_ids, positions, slots, query_start_loc[1:][samples] - 1, pending_dst, pending_src],
            np.int64,
            self.device,
        )
        qsl, seq_lens, tables = to_device_packed(
            [query_start_loc, ends, self.block_table[rows, :max_blocks]], np.int32, self.device
        )
        return StepInputs(
            token_ids=tok,
            positions=pos,
            attn=AttentionMetadata(
                slot_mapping=slot,
                query_start_loc=qsl,
                seq_lens=seq_lens,
                block_tables=tables.view(num_seqs, max_blocks),
                max_query_len=int(nums.max()),
                max_seq_len=int(ends.max()),
                kv_caches=self.kv_caches,
            ),
            sample_rows=sample_rows,
            sample_states=sample_states,
            sample_positions=sample_positions,
            pending_dst=dst,
            pending_src=src,
        )
