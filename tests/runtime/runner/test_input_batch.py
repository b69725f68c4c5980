"""The runner's flat step inputs: values, 16-byte-aligned segments, tokens still pending on the device, decode
batches padded onto the views a CUDA graph reads, and the device copy of the block table kept current."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.engine.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from model_optimizer.runtime.runner.input_batch import InputBatch
from model_optimizer.runtime.sampling_params import SamplingParams

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
    assert inputs.attn.block_tables.shape == (2, 16)  # full rows: a graph's table has one fixed width
    assert inputs.attn.block_tables[:, :2].tolist() == [[5, 2], [7, 0]]
    assert inputs.num_seqs == inputs.num_padded_seqs == 2 and inputs.attn.kv_caches is None
    assert inputs.sample_rows.tolist() == [6] and [s.request_id for s in inputs.sample_states] == ["a"]
    assert not inputs.sample_rows_leading  # a prompt's last token samples: gathered
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
    assert inputs.pending_in_order  # row 0 takes sampled id 0: the runner copies instead of indexing
    assert inputs.sample_rows_leading  # one token per sequence, each sampling: hidden[:1], no gather
    assert inputs.positions.tolist() == [3] and inputs.sample_positions == [1]
    assert not batch.prepare(second, {"a": (state, 1)}).pending_in_order  # its id is row 1 of the last step's
    with pytest.raises(RuntimeError, match="neither on the host nor pending"):
        batch.prepare(second, {})


def test_prefill_metadata_puts_prompts_in_consecutive_blocks():
    from model_optimizer.runtime.layers.attention import AttentionMetadata

    meta = AttentionMetadata.for_prefill([3, 6], block_size=4, kv_caches=[], device=torch.device("cpu"))
    assert meta.block_tables.tolist() == [[0, 0], [1, 2]]  # 1 block, then 2 blocks
    assert meta.slot_mapping.tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert meta.query_start_loc.tolist() == [0, 3, 9] and meta.seq_lens.tolist() == [3, 6]
    assert (meta.max_query_len, meta.max_seq_len) == (6, 6)


def test_decode_batch_is_padded_onto_the_views_its_graph_reads():
    batch = InputBatch(max_num_seqs=8, max_model_len=64, block_size=4, device=torch.device("cpu"))
    batch.pad_sizes = [1, 4, 8]  # two sequences pad to 4
    graph_tokens, graph_positions, graph_meta = batch.decode_views(4)
    first = step([new("a", [10, 11, 12], [3]), new("b", [20, 21], [6])], [], {"a": 3, "b": 2}, {"a", "b"})
    batch.update(first)
    assert batch.prepare(first, {}).num_padded_seqs == 2  # a prefill is never padded
    for rid, token in (("a", 13), ("b", 22)):
        batch.requests[rid].output_token_ids.append(token)
    decode = step([], [CachedRequestData("a", [], 3), CachedRequestData("b", [], 2)], {"a": 1, "b": 1}, {"a", "b"})
    batch.update(decode)
    inputs = batch.prepare(decode, {})
    assert (inputs.num_seqs, inputs.num_padded_seqs) == (2, 4)
    assert inputs.token_ids.data_ptr() == graph_tokens.data_ptr()  # the step is written where the graph reads
    assert inputs.positions.data_ptr() == graph_positions.data_ptr()
    for name in ("slot_mapping", "query_start_loc", "seq_lens", "block_tables"):
        assert getattr(inputs.attn, name).data_ptr() == getattr(graph_meta, name).data_ptr(), name
    assert graph_tokens.tolist() == [13, 22, 0, 0] and graph_positions.tolist() == [3, 2, 0, 0]
    assert graph_meta.slot_mapping.tolist() == [15, 26, -1, -1]  # padded rows store nothing ...
    assert graph_meta.seq_lens.tolist() == [4, 3, 1, 1]  # ... and attend to one slot
    assert graph_meta.query_start_loc.tolist() == [0, 1, 2, 3, 4]
    assert inputs.sample_rows.tolist() == [0, 1]


def test_device_copy_of_the_block_table_follows_added_blocks_and_reused_rows():
    batch = InputBatch(max_num_seqs=2, max_model_len=64, block_size=4, device=torch.device("cpu"))
    # what runs on the GPU: each step filled in a staging buffer and copied over, and a separate device
    # table kept current by the blocks each step adds (which travel in that copy)
    batch.device_block_table = torch.zeros_like(batch.device_block_table)
    batch._mirrored = batch._staged = True
    first = step([new("a", [1, 2, 3, 4, 5], [9, 4]), new("b", [6], [7])], [], {"a": 5, "b": 1}, {"a", "b"})
    batch.update(first)
    inputs = batch.prepare(first, {})
    assert inputs.attn.block_tables[:, :3].tolist() == [[9, 4, 0], [7, 0, 0]]
    for rid in ("a", "b"):
        batch.requests[rid].output_token_ids.append(1)
    second = SchedulerOutput(
        new_requests=[new("c", [8, 8], [11])],
        cached_requests=[CachedRequestData("b", [3], 1)],
        num_scheduled_tokens={"b": 1, "c": 2},
        sampling_request_ids={"b", "c"},
        finished_request_ids={"a"},
    )
    batch.update(second)  # "c" takes the row "a" left, "b" gains a block
    inputs = batch.prepare(second, {})
    assert inputs.attn.block_tables[:, :3].tolist() == [[7, 3, 0], [11, 4, 0]]
    assert inputs.token_ids.tolist() == [1, 8, 8] and inputs.positions.tolist() == [1, 0, 1]
    assert inputs.attn.slot_mapping.tolist() == [29, 44, 45] and inputs.attn.seq_lens.tolist() == [2, 2]
    assert inputs.sample_rows.tolist() == [0, 2]
    assert batch.device_block_table.tolist() == torch.from_numpy(batch.block_table).tolist()
