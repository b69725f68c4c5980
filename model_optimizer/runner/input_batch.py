"""The runner's own copy of each running request, and the flat tensors of one step.

Block tables live in one persistent array, a row per running request, updated with only the
blocks a step adds, so building a step costs the same however long the sequences are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.engine.scheduler import SchedulerOutput
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

    def sampling_input(self) -> SamplingInput:
        return SamplingInput(self.params, self.prompt_token_ids, self.output_token_ids)


@dataclass
class StepInputs:
    token_ids: torch.Tensor
    """(num_tokens,) int64."""
    positions: torch.Tensor
    """(num_tokens,) int64."""
    slot_mapping: torch.Tensor
    """(num_tokens,) int64."""
    query_start_loc: torch.Tensor
    """(num_seqs + 1,) int32."""
    seq_lens: torch.Tensor
    """(num_seqs,) int32."""
    block_tables: torch.Tensor
    """(num_seqs, max_blocks) int32."""
    max_query_len: int
    max_seq_len: int
    sample_rows: torch.Tensor
    """Rows of the flat batch whose last token samples this step (one per sampling request)."""
    sample_request_ids: list[str]

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]


class InputBatch:
    """Requests the runner holds, updated incrementally from each SchedulerOutput."""

    def __init__(self, max_num_seqs: int, max_model_len: int, block_size: int, device: torch.device) -> None:
        self.block_size = block_size
        self.device = device
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
                new.request_id, new.prompt_token_ids, list(new.output_token_ids), new.params, row, new.num_computed_tokens
            )
        for cached in out.cached_requests:
            state = self.requests[cached.request_id]
            self._append_blocks(state.row, cached.new_block_ids)
            state.num_computed_tokens = cached.num_computed_tokens

    def _append_blocks(self, row: int, block_ids: list[int]) -> None:
        start = self.num_row_blocks[row]
        self.block_table[row, start : start + len(block_ids)] = block_ids
        self.num_row_blocks[row] = start + len(block_ids)

    def prepare(self, out: SchedulerOutput) -> StepInputs:
        states = [self.requests[rid] for rid in out.num_scheduled_tokens]
        nums = np.fromiter(out.num_scheduled_tokens.values(), dtype=np.int64, count=len(states))
        starts = np.fromiter((s.num_computed_tokens for s in states), dtype=np.int64, count=len(states))
        rows = np.fromiter((s.row for s in states), dtype=np.int64, count=len(states))
        ends = starts + nums
        token_ids: list[int] = []
        for state, start, end in zip(states, starts.tolist(), ends.tolist()):
            token_ids += state.token_ids(start, end)
        if nums.max() == 1:  # decode-only batch: one token per sequence
            positions, token_rows = starts, rows
        else:
            token_rows = np.repeat(rows, nums)
            positions = np.repeat(ends - nums.cumsum(), nums) + np.arange(nums.sum())
        bs = self.block_size
        slots = self.block_table[token_rows, positions // bs].astype(np.int64) * bs + positions % bs
        query_start_loc = np.concatenate(([0], nums.cumsum()))
        max_blocks = int(-(-ends.max() // bs))
        samples = ends == np.fromiter((s.num_tokens for s in states), dtype=np.int64, count=len(states))
        sample_ids = [s.request_id for s, sample in zip(states, samples.tolist()) if sample]

        def to_device(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype, non_blocking=True)

        return StepInputs(
            token_ids=to_device(np.asarray(token_ids), torch.int64),
            positions=to_device(positions, torch.int64),
            slot_mapping=to_device(slots, torch.int64),
            query_start_loc=to_device(query_start_loc, torch.int32),
            seq_lens=to_device(ends, torch.int32),
            block_tables=to_device(self.block_table[rows, :max_blocks], torch.int32),
            max_query_len=int(nums.max()),
            max_seq_len=int(ends.max()),
            sample_rows=to_device(query_start_loc[1:][samples] - 1, torch.int64),
            sample_request_ids=sample_ids,
        )

    def advance(self, out: SchedulerOutput, sampled: dict[str, tuple[int, object]]) -> None:
        for request_id, num_new in out.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_new
        for request_id, (token_id, _) in sampled.items():
            self.requests[request_id].output_token_ids.append(token_id)
