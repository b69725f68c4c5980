"""Decode CUDA graphs: a replay gives the logits of the same padded batch run eagerly, for several
batch sizes (exact buckets and padded ones), and the capture time is logged.

Run: `pytest -q -rP tests/gpu/test_graphs_gpu.py` prints the capture time; it is also a test property.
"""

from __future__ import annotations

import logging
import random

import pytest
import torch

from model_optimizer import LLM
from model_optimizer.runtime.runner.decode_runner import bucket_for

log = logging.getLogger(__name__)

MAX_NUM_SEQS = 80
BATCH_SIZES = (1, 3, 8, 20, 33, 64, 80)  # buckets 1, 4, 8, 32, 48, 64, 80: padded and exact


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), dtype="bfloat16", num_kv_blocks=2048, max_num_seqs=MAX_NUM_SEQS)


def test_capture_covers_every_bucket_and_logs_its_time(llm, record_property):
    decode = llm.runner.decode_runner
    assert decode is not None and sorted(decode.graphs) == decode.sizes
    assert decode.sizes == [1, 2, 4, 8, 16, 32, 48, 64, 80]
    assert decode.capture_seconds > 0
    record_property("capture_seconds", round(decode.capture_seconds, 3))
    line = f"captured {len(decode.sizes)} decode graphs in {decode.capture_seconds:.2f} s"
    log.warning(line)
    print(line)


@pytest.mark.parametrize("num_seqs", BATCH_SIZES)
@torch.inference_mode()
def test_replay_gives_the_logits_of_the_eager_forward(llm, num_seqs):
    runner, decode = llm.runner, llm.runner.decode_runner
    bs = runner.config.block_size
    rng = random.Random(num_seqs)
    size = bucket_for(num_seqs, decode.sizes)
    token_ids, positions, meta = decode.inputs[size]
    runner.batch.decode_views(size)  # all rows padding (query offsets too), then the real rows below
    lengths = [rng.randrange(1, 200) for _ in range(num_seqs)]
    blocks_per_seq = -(-max(lengths) // bs)
    assert num_seqs * blocks_per_seq < runner.num_kv_blocks
    torch.manual_seed(num_seqs)
    for cache in runner.kv_caches:  # a context of random keys and values to attend to
        cache[:, : num_seqs * blocks_per_seq].normal_()
    table = torch.zeros(size, meta.block_tables.shape[1], dtype=torch.int32)
    slots = [-1] * size
    for i, length in enumerate(lengths):
        table[i, :blocks_per_seq] = torch.arange(i * blocks_per_seq, (i + 1) * blocks_per_seq)
        slots[i] = i * blocks_per_seq * bs + length - 1
    token_ids.copy_(torch.tensor([rng.randrange(3, 1000) for _ in range(size)]))
    positions.copy_(torch.tensor([n - 1 for n in lengths] + [0] * (size - num_seqs)))
    meta.slot_mapping.copy_(torch.tensor(slots))
    meta.seq_lens.copy_(torch.tensor(lengths + [1] * (size - num_seqs), dtype=torch.int32))
    meta.block_tables.copy_(table)

    eager = runner.model.compute_logits(runner.model(token_ids, positions, meta)[:num_seqs]).float()
    decode.graphs[size].replay()
    hidden, *sampled = decode.outputs[size]
    graphed = runner.model.compute_logits(hidden[:num_seqs]).float()
    assert torch.isfinite(eager).all()
    torch.testing.assert_close(graphed, eager, atol=2e-2, rtol=2e-2)  # the same kernels: equal but for rounding
    if sampled:  # the graph's own logits (sampling inside the decode graph) are these too
        torch.testing.assert_close(sampled[0][:num_seqs].float(), eager, atol=2e-2, rtol=2e-2)
