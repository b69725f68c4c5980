"""Multi-head latent attention: the Triton kernel against the torch reference (interpreter on the CPU), the
absorbed reference against the up-projected one, and the latent store.

Small shapes: the interpreter runs every program in Python. Outputs are poisoned with NaN first, so a
row the kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.kernels.formats import FP8_DTYPE
from model_optimizer.runtime.kernels.mla_attention import MlaTiles, latent_attention
from model_optimizer.runtime.kernels.mla_reference import latent_attention_ref, mla_attention_ref, store_latent_ref
from model_optimizer.runtime.kernels.reference import quantize_fp8
from model_optimizer.runtime.kernels.store_kv import store_kv
from tests.runtime.kernels.latent_batches import LatentBatch, make_batch
from tests.runtime.kernels.paged_batches import relative_error

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}
MIXED = [(70, 1), (0, 23), (40, 9), (150, 1), (0, 1), (17, 1)]  # (cached tokens, new tokens) per sequence
DECODE = [(70, 1), (3, 1), (150, 1), (33, 1)]


def run(batch: LatentBatch, num_splits=None, max_query_len=None, tiles=None):
    scale = batch.query.shape[-1] ** -0.5
    args = (batch.query, batch.cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, scale)
    out = torch.full((*batch.query.shape[:2], batch.kv_lora_rank), float("nan"), dtype=batch.query.dtype)
    latent_attention(
        *args,
        batch.kv_lora_rank,
        max_query_len=batch.max_query_len if max_query_len is None else max_query_len,
        max_seq_len=batch.max_seq_len,
        k_scale=batch.k_scale,
        num_splits=num_splits,
        out=out,
        tiles=tiles,
    )
    return out, latent_attention_ref(*args, batch.kv_lora_rank, batch.k_scale)


@pytest.mark.parametrize(
    ("seqs", "num_heads", "kv_lora", "rope", "block_size", "dtype"),
    [
        (MIXED, 4, 32, 8, 16, torch.float32),  # the tiny test models' shape
        (MIXED, 16, 64, 16, 32, torch.bfloat16),  # V2-Lite's 16 heads
        (MIXED, 20, 48, 8, 16, torch.float32),  # heads over one block, a latent that is no power of two
        (DECODE, 3, 32, 16, 64, torch.float16),
        (DECODE, 40, 32, 8, 16, torch.float32),  # three head blocks of 16
    ],
)
def test_kernel_matches_reference(seqs, num_heads, kv_lora, rope, block_size, dtype):
    out, ref = run(make_batch(seqs, num_heads, kv_lora, rope, block_size, dtype, seed=num_heads))
    assert relative_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_split_keys_of_a_decode_batch_agree(num_splits):
    batch = make_batch(DECODE, 4, 32, 8, 16, seed=1)
    out, ref = run(batch, num_splits=num_splits)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


def test_small_prefill_tiles_and_no_hint():
    batch = make_batch(MIXED, 4, 32, 8, 16, seed=2)
    out, ref = run(batch, tiles=MlaTiles(prefill_rows=16, tile_n=16))  # tiles of 4 tokens x 4 heads
    assert relative_error(out, ref) < TOLERANCE[torch.float32]
    out, _ = run(batch, max_query_len=batch.query.shape[0])
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("num_splits", [1, 4])
def test_padded_cuda_graph_batch(num_splits):
    """Decode sequences, then padding sequences without tokens (seq_len 0), as the decode runner pads."""
    batch = make_batch([(33, 1), (64, 1)], 4, 32, 8, 16, seed=3)
    qsl = torch.cat([batch.query_start_loc, batch.query_start_loc[-1:].repeat(2)])
    seq_lens = torch.cat([batch.seq_lens, torch.zeros(2, dtype=torch.int32)])
    tables = torch.cat([batch.block_tables, torch.zeros(2, batch.block_tables.shape[1], dtype=torch.int32)])
    padded = LatentBatch(batch.query, batch.cache, qsl, seq_lens, tables, 1, 64, 32)
    out, ref = run(padded, num_splits=num_splits)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("num_splits", [1, 2])
def test_fp8_cache_and_its_scale(num_splits):
    batch = make_batch(MIXED, 4, 32, 8, 16, torch.bfloat16, fp8=True, seed=4)
    out, ref = run(batch, num_splits=num_splits)
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]
    batch.k_scale = batch.k_scale * 2  # rows twice as large: the scores and the output both change
    doubled, doubled_ref = run(batch, num_splits=num_splits)
    assert relative_error(doubled, doubled_ref) < TOLERANCE[torch.bfloat16]
    assert relative_error(doubled, out) > 0.5


@pytest.mark.parametrize("path", ["reference", "triton"])
def test_nan_row_at_a_later_position_never_reaches_earlier_queries(path):
    batch = make_batch([(5, 30), (0, 12)], 4, 32, 8, 16, seed=5)
    clean, clean_ref = run(batch)
    block = int(batch.block_tables[0, 25 // 16])
    batch.cache[0, block, 25 % 16, 0, 0] = float("nan")  # token 25 of sequence 0: new tokens 0..19 precede it
    batch.cache[0, block, 25 % 16, 0, 1] = float("inf")
    out, ref = run(batch)
    got, expected = (ref, clean_ref) if path == "reference" else (out, clean)
    assert relative_error(got[:20], expected[:20]) < TOLERANCE[torch.float32]
    assert relative_error(got[30:], expected[30:]) < TOLERANCE[torch.float32]
    assert not torch.isfinite(got[20:30].flatten(1)).all(dim=1).any()


def test_absorbed_form_equals_the_up_projected_one():
    """q_nope W_UK against the latent rows, outputs through W_UV: transformers' up-projected attention."""
    num_heads, nope, rope, v_dim, kv_lora = 4, 16, 8, 12, 32
    batch = make_batch(MIXED, num_heads, kv_lora, rope, 16, seed=6)
    gen = torch.Generator().manual_seed(6)
    q_nope = torch.randn(batch.query.shape[0], num_heads, nope, generator=gen)
    q_pe = batch.query[..., kv_lora:]
    kv_b = torch.randn(num_heads * (nope + v_dim), kv_lora, generator=gen) / kv_lora**0.5
    meta = (batch.query_start_loc, batch.seq_lens, batch.block_tables)
    scale = (nope + rope) ** -0.5
    up = mla_attention_ref(q_nope, q_pe, batch.cache, *meta, kv_b, scale)
    w = kv_b.view(num_heads, nope + v_dim, kv_lora)
    q_latent = torch.einsum("thn,hnl->thl", q_nope, w[:, :nope])
    o_latent = latent_attention_ref(torch.cat([q_latent, q_pe], -1), batch.cache, *meta, scale, kv_lora)
    absorbed = torch.einsum("thl,hvl->thv", o_latent, w[:, nope:])
    assert up.shape == absorbed.shape == (batch.query.shape[0], num_heads, v_dim)
    assert relative_error(absorbed, up) < 1e-5


@pytest.mark.parametrize("fp8", [False, True])
def test_store_writes_rows_and_skips_padding(fp8):
    cache = torch.zeros(1, 4, 8, 1, 40, dtype=FP8_DTYPE if fp8 else torch.float32)
    rows = torch.randn(5, 40)
    slots = torch.tensor([3, 17, -1, 31, 0])
    scale = torch.tensor(0.5)
    store_latent_ref(rows, cache, slots, scale)
    flat = cache.view(-1, 40).float() * (0.5 if fp8 else 1.0)
    expected = quantize_fp8(rows, scale).float() * 0.5 if fp8 else rows
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat[slot], expected[i])
    assert int((flat.abs().sum(-1) > 0).sum()) == 4  # the -1 row wrote nothing
    # the GPU path: the full-head store kernel over the one plane seen twice (stride 0) writes the same
    twice = torch.zeros_like(cache)
    store_kv(rows[:, None], rows[:, None], twice.expand(2, -1, -1, -1, -1), slots, scale, scale)
    if fp8:  # rows e4m3 holds exactly: the interpreter's float32 -> e4m3 rounding is not exact in general
        rows = quantize_fp8(rows, None).float() * scale
        store_latent_ref(rows, cache, slots, scale)
        store_kv(rows[:, None], rows[:, None], twice.expand(2, -1, -1, -1, -1), slots, scale, scale)
    assert torch.equal(twice.float(), cache.float())


def test_bad_inputs_raise_value_error():
    batch = make_batch([(10, 2)], 4, 32, 8, 16)
    args = (batch.query_start_loc, batch.seq_lens, batch.block_tables, 0.1)
    with pytest.raises(ValueError, match="cache must be"):
        latent_attention(batch.query[..., :36], batch.cache, *args, 32)
    with pytest.raises(ValueError, match="kv_lora_rank"):
        latent_attention(batch.query, batch.cache, *args, 40)
    with pytest.raises(ValueError, match="seq_lens must be int32"):
        latent_attention(batch.query, batch.cache, batch.query_start_loc, batch.seq_lens.long(), *args[2:], 32)
    with pytest.raises(ValueError, match="dtype"):
        latent_attention(batch.query.half(), batch.cache, *args, 32)
    with pytest.raises(ValueError, match="latent cache"):
        store_latent_ref(torch.zeros(2, 36), batch.cache, torch.tensor([0, 1]))
