"""The runner's own copy of each running request, and the flat tensors of one step."""

from __future__ import annotations

from dataclasses import dataclass

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
    block_ids: list[int]
    num_computed_tokens: int

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_ids(self, start: int, end: int) -> list[int]:
        num_prompt = len(self.prompt_token_ids)
        return (self.prompt_token_ids[start:end] if start < num_prompt else []) + self.output_token_ids[
            max(start - num_prompt, 0) : max(end - num_prompt, 0)
        ]

    def sampling_input(self) -> SamplingInput:
        return SamplingInput(self.params, self.prompt_token_ids, self.output_token_ids)


@dataclass
class StepInputs:
    token_ids: torch.Tensor
    """(num_tokens,) int64."""
    positions: torch.Tensor
    """(num_tokens,) int64."""
    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    max_query_len: int
    max_seq_len: int
    sample_rows: list[int]
    """Row in the flat batch of the last token of each request that samples this step."""
    sample_request_ids: list[str]


class InputBatch:
    """Requests the runner holds, updated incrementally from each SchedulerOutput."""

    def __init__(self, block_size: int, device: torch.device) -> None:
        self.block_size = block_size
        self.device = device
        self.requests: dict[str, CachedRequestState] = {}

    def update(self, out: SchedulerOutput) -> None:
        for request_id in out.finished_request_ids:
            self.requests.pop(request_id, None)
        for new in out.new_requests:
            self.requests[new.request_id] = CachedRequestState(
                new.request_id, new.prompt_token_ids, list(new.output_token_ids), new.params, list(new.block_ids), new.num_computed_tokens
            )
        for cached in out.cached_requests:
            state = self.requests[cached.request_id]
            state.block_ids.extend(cached.new_block_ids)
            state.num_computed_tokens = cached.num_computed_tokens

    def prepare(self, out: SchedulerOutput) -> StepInputs:
        bs = self.block_size
        token_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        query_start_loc = [0]
        seq_lens: list[int] = []
        tables: list[list[int]] = []
        sample_rows, sample_ids = [], []
        for request_id, num_new in out.num_scheduled_tokens.items():
            state = self.requests[request_id]
            start, end = state.num_computed_tokens, state.num_computed_tokens + num_new
            token_ids += state.token_ids(start, end)
            positions += range(start, end)
            slots += [state.block_ids[p // bs] * bs + p % bs for p in range(start, end)]
            query_start_loc.append(len(token_ids))
            seq_lens.append(end)
            tables.append(state.block_ids)
            if end == state.num_tokens:
                sample_rows.append(len(token_ids) - 1)
                sample_ids.append(request_id)
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

        return StepInputs(
            token_ids=tensor(token_ids, torch.int64),
            positions=tensor(positions, torch.int64),
            slot_mapping=tensor(slots, torch.int64),
            query_start_loc=tensor(query_start_loc, torch.int32),
            seq_lens=tensor(seq_lens, torch.int32),
            block_tables=tensor(padded, torch.int32),
            max_query_len=max(out.num_scheduled_tokens.values()),
            max_seq_len=max(seq_lens),
            sample_rows=sample_rows,
            sample_request_ids=sample_ids,
        )

    def advance(self, out: SchedulerOutput, sampled: dict[str, tuple[int, object]]) -> None:
        for request_id, num_new in out.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_new
        for request_id, (token_id, _) in sampled.items():
            self.requests[request_id].output_token_ids.append(token_id)
