"""Triton attention kernels on CUDA at model-sized shapes, against the torch reference.

Tolerances (relative error ||out - ref|| / ||ref||, reference in fp32 on the same cache):
bf16 1.5e-2, fp16 3e-3. fp8 e4m3 KV cache: kernel vs the reference on the same quantized cache
1.5e-2, and the whole fp8 path vs an unquantized cache 6e-2 (per-tensor amax scales on Gaussian
data give about 3.4%).
"""

import pytest
import torch

from model_optimizer.runtime.kernels.reference import FP8_DTYPE, paged_attention_ref, store_kv_ref
from tests.runtime.kernels.paged_batches import batch_kernel, batch_reference, make_paged_batch, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TOLERANCE = {torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
FP8_VS_EXACT = 6e-2
MIXED = [(3000, 1), (0, 512), (1000, 300), (57, 1), (4000, 1), (0, 1), (2047, 65)] + [(700, 1)] * 20


def _attention(batch, num_splits=None, sliding_window=None, softcap=None):
    return batch_kernel(batch, sliding_window, num_splits=num_splits, softcap=softcap)


def _reference(batch, sliding_window=None, softcap=None):
    return batch_reference(batch, sliding_window, softcap=softcap)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("block_size", "num_heads", "num_kv_heads"), [(16, 16, 8), (32, 32, 8), (128, 16, 16), (256, 28, 4)]
)
def test_mixed_batch(dtype, block_size, num_heads, num_kv_heads):
    batch = make_paged_batch(MIXED, num_heads, num_kv_heads, 128, block_size, dtype, device="cuda")
    out = _attention(batch)
    assert relative_error(out, _reference(batch)) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_splits", [None, 1, 16])
@pytest.mark.parametrize("num_seqs", [1, 4, 64])
def test_decode_split_kv(num_splits, num_seqs):
    seqs = [(8191 - 97 * i, 1) for i in range(num_seqs)]
    batch = make_paged_batch(seqs, 16, 8, 128, 16, torch.bfloat16, device="cuda", seed=num_seqs)
    out = _attention(batch, num_splits=num_splits)
    assert relative_error(out, _reference(batch)) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_splits", [1, 4])
def test_sliding_window(num_splits):
    batch = make_paged_batch(MIXED, 16, 8, 128, 16, torch.bfloat16, device="cuda", seed=3)
    out = _attention(batch, num_splits=num_splits, sliding_window=1024)
    assert relative_error(out, _reference(batch, 1024)) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_splits", [None, 1, 8])
@pytest.mark.parametrize("sliding_window", [None, 1024])
def test_softcap_at_gemma2_head_dim(num_splits, sliding_window):
    """Gemma 2's attention soft-capping on head_dim 256, prefill and decode, split-KV and window; a cap of 1
    (the releases' is 50) so that it bites on unit-variance scores."""
    batch = make_paged_batch(MIXED[:8], 16, 8, 256, 16, torch.bfloat16, device="cuda", seed=9)
    out = _attention(batch, num_splits=num_splits, sliding_window=sliding_window, softcap=1.0)
    assert relative_error(out, _reference(batch, sliding_window, softcap=1.0)) < TOLERANCE[torch.bfloat16]
    assert relative_error(out, _reference(batch, sliding_window)) > 0.05


@pytest.mark.parametrize("num_splits", [None, 1, 8])
@pytest.mark.parametrize("sliding_window", [None, 128])
def test_attention_sinks_at_gpt_oss_shapes(num_splits, sliding_window):
    """gpt-oss's attention sinks on head_dim 64, 64 query heads over 8 KV heads, prefill and decode, split-KV
    and its 128-token window; bf16 sinks as the model holds them, large enough to matter."""
    from model_optimizer.runtime.kernels.paged_attention import paged_attention

    batch = make_paged_batch(MIXED[:8], 64, 8, 64, 16, torch.bfloat16, device="cuda", seed=11)
    sinks = (torch.randn(64, generator=torch.Generator().manual_seed(3)) * 2 + 2).to("cuda", torch.bfloat16)

    def run(s):
        out = torch.full_like(batch.query, float("nan"))
        args = (batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables)
        paged_attention(*args, batch.query.shape[-1] ** -0.5, sliding_window, max_query_len=batch.max_query_len,
                        max_seq_len=batch.max_seq_len, num_splits=num_splits, out=out, sinks=s)  # fmt: skip
        return out

    ref = paged_attention_ref(batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens,
                              batch.block_tables, batch.query.shape[-1] ** -0.5, sliding_window, sinks=sinks)  # fmt: skip
    out = run(sinks)
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]
    assert relative_error(run(None), ref) > 0.05


def test_head_dim_64_and_256():
    for head_dim in (64, 256):
        batch = make_paged_batch(MIXED[:8], 8, 2, head_dim, 16, torch.bfloat16, device="cuda", seed=head_dim)
        assert relative_error(_attention(batch), _reference(batch)) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_splits", [1, 8])
def test_fp8_cache(num_splits):
    exact = make_paged_batch(MIXED, 16, 8, 128, 16, torch.bfloat16, device="cuda", seed=5)
    fp8 = make_paged_batch(MIXED, 16, 8, 128, 16, torch.bfloat16, device="cuda", kv_dtype=FP8_DTYPE, seed=5)
    out = _attention(fp8, num_splits=num_splits)
    assert relative_error(out, _reference(fp8)) < TOLERANCE[torch.bfloat16]
    assert relative_error(out, _reference(exact)) < FP8_VS_EXACT


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float16, FP8_DTYPE])
def test_store_kv(cache_dtype):
    from model_optimizer.runtime.kernels.store_kv import store_kv

    dtype = torch.float16 if cache_dtype == torch.float16 else torch.bfloat16
    cache = torch.randn(2, 64, 16, 8, 128, device="cuda").to(cache_dtype)
    key = torch.randn(300, 8, 128, device="cuda", dtype=dtype) * 3
    value = torch.randn(300, 8, 128, device="cuda", dtype=dtype)
    slots = torch.randperm(64 * 16, device="cuda")[:300]
    slots[::7] = -1
    scales = (
        (torch.tensor(0.02, device="cuda"), torch.tensor(0.005, device="cuda"))
        if cache_dtype == FP8_DTYPE
        else (None, None)
    )
    expected, actual = cache.clone(), cache.clone()
    store_kv_ref(key, value, expected, slots, *scales)
    store_kv(key, value, actual, slots, *scales)
    if cache_dtype == FP8_DTYPE:  # both round to nearest even after an IEEE division
        mismatch = (actual.view(torch.uint8) != expected.view(torch.uint8)).float().mean().item()
        assert mismatch < 1e-4
        assert not actual.float().isnan().any()
    else:
        assert torch.equal(actual, expected)


def test_cuda_graph_replay_follows_new_inputs():
    """Capture store + attention once for a decode batch, then replay with new tokens and lengths."""
    from model_optimizer.runtime.kernels.paged_attention import paged_attention
    from model_optimizer.runtime.kernels.store_kv import store_kv

    seqs = [(1500, 1), (40, 1), (3000, 1), (700, 1)]
    batch = make_paged_batch([(c + 8, 1) for c, _ in seqs], 16, 8, 128, 16, torch.bfloat16, device="cuda")
    static = {name: getattr(batch, name).clone() for name in ("query", "query_start_loc", "seq_lens", "slot_mapping")}
    key = torch.randn(len(seqs), 8, 128, device="cuda", dtype=torch.bfloat16)
    value = torch.randn_like(key)
    out = torch.empty_like(batch.query)

    def step():
        store_kv(key, value, batch.kv_cache, static["slot_mapping"])
        paged_attention(
            static["query"],
            batch.kv_cache,
            static["query_start_loc"],
            static["seq_lens"],
            batch.block_tables,
            128**-0.5,
            max_query_len=1,
            max_seq_len=4096,
            out=out,
        )

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for shrink in (8, 3):  # replay at shorter contexts: values change, shapes do not
        lens = torch.tensor([c + 9 - shrink for c, _ in seqs], dtype=torch.int32, device="cuda")
        static["seq_lens"].copy_(lens)
        pos = lens.long() - 1
        static["slot_mapping"].copy_(
            batch.block_tables[torch.arange(len(seqs), device="cuda"), pos // 16].long() * 16 + pos % 16
        )
        static["query"].copy_(torch.randn_like(static["query"]))
        key.copy_(torch.randn_like(key))
        value.copy_(torch.randn_like(value))
        out.fill_(float("nan"))
        expected_cache = batch.kv_cache.clone()
        store_kv_ref(key, value, expected_cache, static["slot_mapping"])
        graph.replay()
        assert torch.equal(batch.kv_cache, expected_cache)
        ref = paged_attention_ref(
            static["query"],
            batch.kv_cache,
            static["query_start_loc"],
            static["seq_lens"],
            batch.block_tables,
            128**-0.5,
        )
        assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, FP8_DTYPE])
@pytest.mark.parametrize("norm", [True, False])
def test_rotary_store_writes_what_rotary_then_store_kv_write_in_a_cuda_graph(cache_dtype, norm):
    """Captured once beside the two-launch path (norm_rotate, then store_kv of its k) on the same inputs,
    replayed twice with new tokens, positions and slots (padding slots -1): the same q and the same cache
    bits, and the cache is what store_kv_ref writes of that k."""
    from model_optimizer.runtime.kernels.reference import KVStore
    from model_optimizer.runtime.kernels.rotary import norm_rotate, norm_rotate_store
    from model_optimizer.runtime.kernels.store_kv import store_kv
    from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding

    tokens, heads, kv_heads, head_dim, block_size = 8, 32, 8, 128, 16
    rotary = RotaryEmbedding(RopeConfig(head_dim, 4096, theta=1e6)).to("cuda")
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, device="cuda", dtype=torch.bfloat16)
    positions = torch.zeros(tokens, dtype=torch.int64, device="cuda")
    # distinct slots from the first (eager) call on: tokens sharing a slot race, and the two kernels' last
    # writers differ (the H200 saw caches differ at slot 0 when every token of the eager call wrote there)
    slots = torch.arange(tokens, dtype=torch.int64, device="cuda")
    weights = [torch.rand(head_dim, device="cuda").to(torch.bfloat16) + 0.5 for _ in range(2)] if norm else []
    scales = [torch.tensor(s, device="cuda") for s in (0.05, 0.02)] if cache_dtype == FP8_DTYPE else [None, None]
    plain = torch.randn(2, 64, block_size, kv_heads, head_dim, device="cuda").to(cache_dtype)
    fused = plain.clone()
    out = {}

    def step():
        q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        q, k, v = (x.view(tokens, -1, head_dim) for x in (q, k, v))
        out["q"], out["k"] = norm_rotate(q, k, positions, rotary.cos, rotary.sin, *weights)
        store_kv(out["k"], v, plain, slots, *scales)
        store = KVStore(v, fused, slots, *scales)
        out["fused_q"] = norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, store, *weights)

    step()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for replay in range(2):
        qkv.copy_(3 * torch.randn_like(qkv))
        positions.copy_(torch.randint(0, 4096, (tokens,), device="cuda"))
        slots.copy_(torch.randperm(64 * block_size, device="cuda")[:tokens])
        slots[replay::3] = -1  # padding of a CUDA-graph batch
        before = fused.clone()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out["fused_q"], out["q"])
        assert torch.equal(fused.view(torch.uint8), plain.view(torch.uint8)), "fused and two-launch caches differ"
        expected = before
        v = qkv[:, (heads + kv_heads) * head_dim :].view(tokens, kv_heads, head_dim)
        store_kv_ref(out["k"], v, expected, slots, *scales)
        if cache_dtype == FP8_DTYPE:  # torch and the kernel both round to nearest even after an IEEE division
            assert (fused.view(torch.uint8) != expected.view(torch.uint8)).float().mean().item() < 1e-4
        else:
            assert torch.equal(fused, expected)
