"""The runner's flat step inputs: values, 16-byte-aligned segments, and tokens still pending on the device."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.engine.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from model_optimizer.runner.input_batch import InputBatch
from model_optimizer.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=8)


def new(rid: str, prompt: list[int], blocks: list[int]) -> NewRequestData:
    return NewRequestData(rid, prompt, [], PARAMS, blocks, 0)


def step(new_requests, cached, scheduled: dict[str, int], sampling: set[str]) -> SchedulerOutput:
    return SchedulerOutput(
        new_requests=new_requests, cached_requests=cached, num_scheduled_tokens=scheduled, sampling_request_ids=sampling
    )


def test_mixed_batch_values_and_aligned_segments():
    batch = InputBatch(max_num_seqs=4, max_model_len=64, block_size=4, device=torch.device("cpu"))
    # "a": 7 prompt tokens, all computed now; "b": first 3 of its 9 prompt tokens (a chunk, no sample)
    out = step(
        [new("a", [10, 11, 12, 13, 14, 15, 16], [5, 2]), new("b", list(range(20, 29)), [7])],
        [],
        {"a": 7, "b": 3},
        {"a"},
    )
    batch.update(out)
    inputs = batch.prepare(out, {})
    assert inputs.token_ids.tolist() == [10, 11, 12, 13, 14, 15, 16, 20, 21, 22]
    assert inputs.positions.tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]
    assert inputs.attn.slot_mapping.tolist() == [20, 21, 22, 23, 8, 9, 10, 28, 29, 30]
    assert inputs.attn.query_start_loc.tolist() == [0, 7, 10] and inputs.attn.seq_lens.tolist() == [7, 3]
    assert inputs.attn.block_tables.tolist() == [[5, 2], [7, 0]]
    assert inputs.sample_rows.tolist() == [6] and [s.request_id for s in inputs.sample_states] == ["a"]
    assert inputs.sample_positions == [0]
    for tensor in (
        inputs.token_ids,
        inputs.positions,
        inputs.attn.slot_mapping,
        inputs.sample_rows,
        inputs.attn.query_start_loc,
        inputs.attn.seq_lens,
        inputs.attn.block_tables,
    ):
        assert tensor.data_ptr() % 16 == 0  # Triton specialises kernels on pointer alignment


def test_pending_token_is_marked_for_the_device_and_unknown_ones_are_refused():
    batch = InputBatch(max_num_seqs=2, max_model_len=64, block_size=4, device=torch.device("cpu"))
    first = step([new("a", [10, 11, 12], [0])], [], {"a": 3}, {"a"})
    batch.update(first)
    batch.prepare(first, {})
    state = batch.requests["a"]
    second = step([], [CachedRequestData("a", [], 3)], {"a": 1}, {"a"})  # decodes the token step 1 is sampling
    batch.update(second)
    inputs = batch.prepare(second, {"a": (state, 0)})
    assert inputs.pending_dst.tolist() == [0] and inputs.pending_src.tolist() == [0]
    assert inputs.positions.tolist() == [3] and inputs.sample_positions == [1]
    with pytest.raises(RuntimeError, match="neither on the host nor pending"):
        batch.prepare(second, {})


def test_prefill_metadata_puts_prompts_in_consecutive_blocks():
    from model_optimizer.layers.attention import AttentionMetadata

    meta = AttentionMetadata.for_prefill([3, 6], block_size=4, kv_caches=[], device=torch.device("cpu"))
    assert meta.block_tables.tolist() == [[0, 0], [1, 2]]  # 1 block, then 2 blocks
    assert meta.slot_mapping.tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert meta.query_start_loc.tolist() == [0, 3, 9] and meta.seq_lens.tolist() == [3, 6]
    assert (meta.max_query_len, meta.max_seq_len) == (6, 6)
