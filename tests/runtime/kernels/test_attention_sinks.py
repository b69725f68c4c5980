"""gpt-oss's attention sinks (one learned logit per head in each softmax denominator, its weight dropped) in
the Triton paged attention kernel (through the interpreter on the CPU) and in the torch reference, each
against a plain torch rendering of transformers' eager GptOss attention (`_sinks_reference` below, which
shares no code with either)."""

import pytest
import torch

from model_optimizer.runtime.kernels.reference import FP8_DTYPE
from tests.runtime.kernels.paged_batches import batch_kernel, batch_reference, make_paged_batch, relative_error

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1.5e-2}
MIXED = [(70, 1), (0, 23), (40, 9), (150, 1), (0, 1), (17, 1)]  # (cached tokens, new tokens) per sequence


def _sinks(num_heads: int, seed: int = 5) -> torch.Tensor:
    """Sink logits large enough (about the scores' size and above) that they move every row's result."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_heads, generator=gen) * 1.5 + 1.0


def _sinks_reference(batch, sinks, sliding_window=None) -> torch.Tensor:
    """transformers' eager_attention_forward of GptOss, one sequence at a time over a dense copy of its keys and
    values: scores * scale + mask, the sink concatenated as a last column, minus the row max, softmax, the
    sink's column dropped, times V. float32 throughout."""
    q_all, cache = batch.query.float(), batch.kv_cache
    k_scale = 1.0 if batch.k_scale is None else batch.k_scale.float()
    v_scale = 1.0 if batch.v_scale is None else batch.v_scale.float()
    block_size, num_kv_heads, head_dim = cache.shape[2], cache.shape[3], cache.shape[4]
    num_heads = q_all.shape[1]
    out = torch.zeros_like(q_all)
    starts = batch.query_start_loc.tolist()
    for i, seq_len in enumerate(batch.seq_lens.tolist()):
        q = q_all[starts[i] : starts[i + 1]]
        q_len = q.shape[0]
        if q_len == 0:
            continue
        positions = torch.arange(seq_len)
        blocks = batch.block_tables[i, positions // block_size].long()
        k = cache[0, blocks, positions % block_size].float() * k_scale  # (seq_len, kv_heads, head_dim)
        v = cache[1, blocks, positions % block_size].float() * v_scale
        k = k.repeat_interleave(num_heads // num_kv_heads, dim=1)
        v = v.repeat_interleave(num_heads // num_kv_heads, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * head_dim**-0.5
        q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        mask = positions[None, :] > q_pos
        if sliding_window is not None:
            mask |= positions[None, :] <= q_pos - sliding_window
        scores = scores + torch.where(mask, float("-inf"), 0.0)
        combined = torch.cat([scores, sinks.float().reshape(-1, 1, 1).expand(-1, q_len, 1)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = combined.softmax(dim=-1)[..., :-1]
        out[starts[i] : starts[i + 1]] = torch.einsum("hqk,khd->qhd", probs, v)
    return out


def _kernel(batch, sinks, sliding_window=None, num_splits=None):
    return batch_kernel(batch, sliding_window, num_splits=num_splits, sinks=sinks)


def _torch_path(batch, sinks, sliding_window=None):
    return batch_reference(batch, sliding_window, sinks=sinks)


CASES = [
    (MIXED, None, 1),  # prefill chunks and decode tokens in one batch
    (MIXED, 24, 1),  # with a window (gpt-oss's sliding layers)
    ([(200, 1), (5, 1), (90, 1)], None, 3),  # decode only, split-KV: the sink counted once over the splits
    ([(200, 1), (70, 1)], 33, 4),  # decode only, split-KV inside a window
    ([(300, 1)], 16, 8),  # splits past the window: most see no key at all
]
IDS = ["mixed", "mixed-window", "decode-split", "decode-split-window", "splits-outside-window"]


@pytest.mark.parametrize(("seqs", "sliding_window", "num_splits"), CASES, ids=IDS)
def test_torch_path_matches_transformers_formula(seqs, sliding_window, num_splits):
    batch = make_paged_batch(seqs, 8, 2, 32, 16, torch.float32, seed=21)
    sinks = _sinks(8)
    expected = _sinks_reference(batch, sinks, sliding_window)
    assert relative_error(_torch_path(batch, sinks, sliding_window), expected) < 1e-6
    assert relative_error(_torch_path(batch, None, sliding_window), expected) > 0.05  # the sinks mattered


@pytest.mark.parametrize(("seqs", "sliding_window", "num_splits"), CASES, ids=IDS)
def test_kernel_matches_transformers_formula(seqs, sliding_window, num_splits):
    batch = make_paged_batch(seqs, 8, 2, 32, 16, torch.float32, seed=22)
    sinks = _sinks(8, seed=6)
    out = _kernel(batch, sinks, sliding_window, num_splits)
    expected = _sinks_reference(batch, sinks, sliding_window)
    assert not out.isnan().any()
    assert relative_error(out, expected) < TOLERANCE[torch.float32]
    assert relative_error(_kernel(batch, None, sliding_window, num_splits), expected) > 0.05


def test_a_very_large_sink_empties_the_rows_and_a_very_small_one_changes_nothing():
    """The sink's weight is dropped: a sink far above every score leaves (almost) nothing of V; one far below
    leaves plain attention. Per head: heads 0-3 large, 4-7 small."""
    batch = make_paged_batch(MIXED, 8, 2, 32, 16, torch.float32, seed=23)
    sinks = torch.tensor([60.0] * 4 + [-60.0] * 4)
    for num_splits in (1, 2):
        out = _kernel(batch, sinks) if num_splits == 1 else None
        if out is None:  # split-KV: a decode-only batch
            batch = make_paged_batch([(90, 1), (33, 1)], 8, 2, 32, 16, torch.float32, seed=24)
            out = _kernel(batch, sinks, num_splits=2)
        plain = _kernel(batch, None, num_splits=num_splits)
        assert out[:, :4].abs().max() < 1e-12
        assert relative_error(out[:, 4:], plain[:, 4:]) < 1e-6


@pytest.mark.parametrize(("kv_dtype", "num_splits", "window"), [(torch.bfloat16, 1, None), (FP8_DTYPE, 2, None),
                                                                  (FP8_DTYPE, 1, 24), (torch.bfloat16, 3, 33)])  # fmt: skip
def test_sinks_in_half_precision_and_over_an_fp8_cache(kv_dtype, num_splits, window):
    """bf16 queries and sinks (the model's own dtype), over a bf16 cache and an fp8 one (scale in q first)."""
    seqs = MIXED if num_splits == 1 else [(200, 1), (5, 1), (90, 1)]
    batch = make_paged_batch(seqs, 8, 2, 64, 16, torch.bfloat16, kv_dtype=kv_dtype, seed=25)
    sinks = _sinks(8, seed=7).to(torch.bfloat16)
    out = _kernel(batch, sinks, window, num_splits)
    expected = _sinks_reference(batch, sinks, window)
    assert relative_error(out, expected) < TOLERANCE[torch.bfloat16]
    assert relative_error(_torch_path(batch, sinks, window), expected) < TOLERANCE[torch.bfloat16]


def test_bad_sinks_raise_value_error():
    batch = make_paged_batch(MIXED, 8, 2, 32, 16, torch.float32, seed=26)
    for bad in (torch.zeros(4), torch.zeros(8, dtype=torch.int32), torch.zeros(16)[::2]):
        with pytest.raises(ValueError, match="sinks"):
            _kernel(batch, bad)
