"""Triton paged attention against the torch reference, through the Triton interpreter on the CPU.

Small shapes (the interpreter runs every program in Python). Each case poisons the output with
NaN first, so a row the kernel forgets to write fails the comparison.
"""

import pytest
import torch

from model_optimizer.runtime.kernels.paged_attention import Tiles, choose_num_splits, paged_attention
from model_optimizer.runtime.kernels.reference import FP8_DTYPE, paged_attention_ref
from tests.runtime.kernels.paged_batches import batch_kernel, batch_reference, make_paged_batch, relative_error

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
MIXED = [(70, 1), (0, 23), (40, 9), (150, 1), (0, 1), (17, 1)]  # (cached tokens, new tokens) per sequence


def _run(batch, sliding_window=None, num_splits=None, max_query_len=None, tiles=None, softcap=None):
    query_len = batch.max_query_len if max_query_len is None else max_query_len
    out = batch_kernel(
        batch, sliding_window, num_splits=num_splits, max_query_len=query_len, tiles=tiles, softcap=softcap
    )
    return out, batch_reference(batch, sliding_window, softcap=softcap)


@pytest.mark.parametrize(
    ("block_size", "num_heads", "num_kv_heads", "head_dim", "dtype"),
    [
        (16, 2, 2, 32, torch.float32),  # MHA
        (32, 4, 2, 64, torch.float32),  # GQA 2
        (64, 8, 2, 128, torch.bfloat16),  # GQA 4
        (256, 4, 1, 32, torch.float16),  # block bigger than the whole context
        (16, 6, 2, 48, torch.float32),  # group 3 and head_dim 48: padded rows and dims
    ],
)
def test_mixed_batch_matches_reference(block_size, num_heads, num_kv_heads, head_dim, dtype):
    batch = make_paged_batch(MIXED, num_heads, num_kv_heads, head_dim, block_size, dtype)
    out, ref = _run(batch)
    assert not out.isnan().any()
    assert relative_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("tiles", [Tiles(max_rows=16, tile_n=16), Tiles(max_rows=128, tile_n=128, num_warps=8)])
def test_other_launch_shapes(tiles):
    # the shapes benchmarks/attention_kernels.py sweeps must be correct too
    batch = make_paged_batch(MIXED, 4, 2, 32, 16, torch.float32, seed=10)
    out, ref = _run(batch, tiles=tiles, sliding_window=40)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_decode_batch_single_pass_and_split_kv_agree(num_splits):
    batch = make_paged_batch([(200, 1), (5, 1), (90, 1)], 4, 2, 64, 16, torch.float32, seed=1)
    out, ref = _run(batch, num_splits=num_splits)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.slow
def test_split_kv_on_mixed_batch_and_window():
    batch = make_paged_batch(MIXED, 4, 2, 32, 16, torch.float32, seed=2)
    out, ref = _run(batch, sliding_window=24, num_splits=4)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("sliding_window", [1, 8, 33, 1000])
def test_sliding_window(sliding_window):
    batch = make_paged_batch(MIXED, 4, 2, 32, 16, torch.float32, seed=3)
    out, ref = _run(batch, sliding_window=sliding_window)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


def test_window_changes_the_result():
    # guards the test above against a window that is silently ignored
    batch = make_paged_batch([(100, 4)], 2, 1, 32, 16, torch.float32, seed=4)
    windowed, _ = _run(batch, sliding_window=8)
    full, _ = _run(batch)
    assert relative_error(windowed, full) > 0.05


@pytest.mark.slow
def test_small_max_query_len_hint_still_correct_and_default_hint():
    batch = make_paged_batch(MIXED, 4, 2, 32, 32, torch.bfloat16, seed=5)
    out, ref = _run(batch, max_query_len=2)  # tiles of 2 tokens: many tiles per prefill chunk
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]
    out = paged_attention(
        batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, 32**-0.5
    )
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_splits", [1, 4])
def test_padded_cuda_graph_batch(num_splits):
    # two real decode sequences, then padding: sequences with no tokens and tokens past the batch
    batch = make_paged_batch([(33, 1), (64, 1)], 4, 2, 32, 16, torch.float32, seed=6)
    pad_seqs, pad_tokens = 2, 3
    query = torch.cat([batch.query, torch.randn(pad_tokens, 4, 32)])
    qsl = torch.cat([batch.query_start_loc, batch.query_start_loc[-1:].repeat(pad_seqs)])
    seq_lens = torch.cat([batch.seq_lens, torch.zeros(pad_seqs, dtype=torch.int32)])
    tables = torch.cat([batch.block_tables, torch.zeros(pad_seqs, batch.block_tables.shape[1], dtype=torch.int32)])
    out = torch.full_like(query, float("nan"))
    paged_attention(
        query, batch.kv_cache, qsl, seq_lens, tables, 32**-0.5, max_query_len=1, num_splits=num_splits, out=out
    )
    ref = paged_attention_ref(
        batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, 32**-0.5
    )
    assert relative_error(out[:2], ref) < TOLERANCE[torch.float32]
    if num_splits > 1:  # the merge kernel writes zeros for tokens outside the batch
        assert torch.equal(out[2:], torch.zeros_like(out[2:]))


@pytest.mark.parametrize("num_splits", [1, 2])
def test_fp8_cache(num_splits):
    batch = make_paged_batch(MIXED, 4, 2, 64, 16, torch.bfloat16, kv_dtype=FP8_DTYPE, seed=7)
    assert batch.kv_cache.dtype == FP8_DTYPE
    out, ref = _run(batch, num_splits=num_splits)
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]


def test_fp8_scales_are_applied():
    batch = make_paged_batch([(40, 3)], 2, 1, 32, 16, torch.float32, kv_dtype=FP8_DTYPE, seed=8)
    out, ref = _run(batch)
    batch.v_scale = batch.v_scale * 2  # doubling v_scale doubles the output
    doubled, _ = _run(batch)
    assert relative_error(doubled, 2 * out) < 1e-5


@pytest.mark.parametrize(
    ("seqs", "sliding_window", "num_splits"),
    [
        (MIXED, None, 1),  # prefill chunks and decode tokens in one batch
        (MIXED, 24, 1),  # with a window
        ([(200, 1), (5, 1), (90, 1)], None, 3),  # decode only, split-KV
        ([(200, 1), (70, 1)], 33, 4),  # decode only, split-KV inside a window
    ],
    ids=["mixed", "mixed-window", "decode-split", "decode-split-window"],
)
def test_softcap_matches_reference(seqs, sliding_window, num_splits):
    """Gemma 2's attention soft-capping: the kernel caps the true scaled scores, not its base-2 ones."""
    batch = make_paged_batch(seqs, 4, 2, 32, 16, torch.float32, seed=12)
    out, ref = _run(batch, sliding_window=sliding_window, num_splits=num_splits, softcap=1.5)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]
    _, uncapped = _run(batch, sliding_window=sliding_window, num_splits=num_splits)
    assert relative_error(out, uncapped) > 0.05  # a cap this low changes the result: it was applied


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8_DTYPE])
def test_softcap_in_half_precision_and_over_an_fp8_cache(kv_dtype):
    """bf16 dots, and the fp8 path, which puts the scale into q before the dot and k_scale after it."""
    batch = make_paged_batch(MIXED, 4, 2, 64, 16, torch.bfloat16, kv_dtype=kv_dtype, seed=13)
    out, ref = _run(batch, num_splits=2 if kv_dtype == FP8_DTYPE else 1, softcap=2.0)
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]


def test_choose_num_splits():
    assert choose_num_splits(1, 8, 1, 8192, 132) > 1  # batch 1, long context: split
    assert choose_num_splits(1, 8, 1, 200, 132) == 1  # short context: one pass
    assert choose_num_splits(64, 8, 1, 8192, 132) == 1  # grid already full
    assert choose_num_splits(1, 8, 16, 8192, 132) == 1  # prefill in the batch
    assert choose_num_splits(2, 8, 1, 1024, 132) == 1024 // 64  # no split under one 64-key tile
    assert choose_num_splits(1, 1, 1, None, 132) == 32  # unknown context: capped


def test_bad_inputs_raise_value_error():
    batch = make_paged_batch([(10, 2)], 4, 2, 32, 16)
    args = (batch.query_start_loc, batch.seq_lens, batch.block_tables, 0.1)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        paged_attention(batch.query[:, :3], batch.kv_cache, *args)
    with pytest.raises(ValueError, match="head_dim"):
        paged_attention(batch.query[..., :16], batch.kv_cache, *args)
    with pytest.raises(ValueError, match="query_start_loc"):
        paged_attention(batch.query, batch.kv_cache, batch.query_start_loc[:1], *args[1:])
    with pytest.raises(ValueError, match="sliding_window"):
        paged_attention(batch.query, batch.kv_cache, *args, sliding_window=0)
    with pytest.raises(ValueError, match="softcap"):
        paged_attention(batch.query, batch.kv_cache, *args, softcap=0.0)
    with pytest.raises(ValueError, match="dtype"):
        paged_attention(batch.query.half(), batch.kv_cache, *args)
    with pytest.raises(ValueError, match="seq_lens must be int32"):
        paged_attention(batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens.long(), *args[2:])


@pytest.mark.parametrize("max_query_len", [1, None])
def test_decode_batch_with_idle_sequence_in_the_middle(max_query_len):
    # a sequence with no new token between two decode tokens: program i must still serve sequence i
    batch = make_paged_batch([(33, 1), (20, 0), (64, 1), (5, 0)], 4, 2, 32, 16, torch.float32, seed=9)
    assert batch.query.shape[0] == 2
    out, ref = _run(batch, max_query_len=max_query_len or batch.query.shape[0])
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


def _poison_position(batch, seq: int, position: int, plane: int = 1) -> None:
    """Put NaN and inf into the cached values (plane 1) or keys (plane 0) of one token."""
    block_size = batch.kv_cache.shape[2]
    block = int(batch.block_tables[seq, position // block_size])
    batch.kv_cache[plane, block, position % block_size, :, 0] = float("nan")
    batch.kv_cache[plane, block, position % block_size, :, 1] = float("inf")


@pytest.mark.parametrize("plane", [0, 1], ids=["keys", "values"])
@pytest.mark.parametrize("path", ["reference", "triton"])
def test_nan_at_a_later_position_never_reaches_earlier_queries(path, plane):
    """A NaN/inf key or value of token p is masked for the queries before p: a masked weight is selected
    away, not multiplied by zero (0 * NaN is NaN). Earlier tokens keep exactly their clean result."""
    batch = make_paged_batch([(5, 30), (0, 12)], 4, 2, 32, 16, torch.float32, seed=11)
    clean, ref = _run(batch)
    poison_at = 5 + 20  # sequence 0: new tokens 0..19 come before it
    _poison_position(batch, 0, poison_at, plane)
    out, poisoned_ref = _run(batch)
    got = poisoned_ref if path == "reference" else out
    expected = ref if path == "reference" else clean
    assert torch.isfinite(got[:20]).all()
    assert relative_error(got[:20], expected[:20]) < TOLERANCE[torch.float32]
    assert relative_error(got[30:], expected[30:]) < TOLERANCE[torch.float32]  # the other sequence
    assert not torch.isfinite(got[20:30].flatten(1)).all(dim=1).any()  # tokens that see it are not clean


def test_fp8_decode_tiles_come_from_the_table_or_the_environment(monkeypatch):
    from model_optimizer.runtime.kernels.paged_attention import FP8_DECODE_TILES, FP8_TILES_ENV, default_tiles

    monkeypatch.delenv(FP8_TILES_ENV, raising=False)
    assert default_tiles(True, 1) == FP8_DECODE_TILES and default_tiles(False, 1) == Tiles()
    monkeypatch.setenv(FP8_TILES_ENV, "128,8,3")
    assert default_tiles(True, 1) == Tiles(tile_n=128, num_warps=8, num_stages=3)
    assert default_tiles(True, 16) == Tiles() and default_tiles(False, 1) == Tiles()  # prefill, bf16: untouched
    monkeypatch.setenv(FP8_TILES_ENV, "128,8")
    with pytest.raises(ValueError, match="three integers"):
        default_tiles(True, 1)
