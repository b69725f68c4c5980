"""NaN/inf logits on the GPU: the fused sampling kernel and the torch path flag the row without a host
sync of their own, and the engine (Triton attention, CUDA graphs, async steps) fails that request alone."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM
from model_optimizer.runtime.engine.request import NONFINITE_ERROR, NONFINITE_TOKEN
from model_optimizer.runtime.kernels.sampling import gumbel_sample_checked
from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
from model_optimizer.runtime.sampling_params import SamplingParams
from tests.runtime.engine.test_nonfinite import CLEAN, GREEDY, OTHER, POISONED, ids, nan_model  # noqa: F401

VOCAB = 151936


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_kernel_flags_nonfinite_rows_at_full_vocabulary(dtype):
    logits = torch.randn(64, VOCAB, device="cuda").to(dtype)
    logits[3] = float("nan")
    logits[10, 150000] = float("nan")  # in the last chunk
    logits[20, 5] = float("inf")
    logits[30, 77777] = float("-inf")
    inv = torch.where(torch.arange(64, device="cuda") % 2 == 0, 0.0, 1.3).float()
    token_ids, finite = gumbel_sample_checked(logits, inv, torch.arange(64, device="cuda", dtype=torch.int64))
    bad = {3, 10, 20, 30}
    assert finite.tolist() == [i not in bad for i in range(64)]
    assert ((token_ids >= 0) & (token_ids < VOCAB)).all()  # a next step may read every one
    greedy_rows = [i for i in range(0, 64, 2) if i not in bad]
    assert token_ids[greedy_rows].tolist() == logits[greedy_rows].float().argmax(dim=1).tolist()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "torch"])
def test_sampler_flags_rows_on_the_device(fused):
    sampler = Sampler(torch.device("cuda"), seed=0, fused=fused)
    logits = torch.randn(8, VOCAB, device="cuda", dtype=torch.bfloat16)
    logits[2] = float("nan")
    logits[5, 9] = float("inf")
    params = SamplingParams(temperature=0.8) if fused else SamplingParams(temperature=0.8, top_k=50)
    batch = [SamplingInput(params, [1], []) for _ in range(8)]
    sampled = sampler.sample(logits, batch)
    assert sampled.token_ids.is_cuda and sampled.finite.is_cuda
    checked = sampled.checked_ids().tolist()
    assert [i for i, t in enumerate(checked) if t == NONFINITE_TOKEN] == [2, 5]
    assert all(0 <= t < VOCAB for t in sampled.token_ids.tolist())


@pytest.mark.parametrize(
    "settings",
    [
        {"async_scheduling": True},
        {"async_scheduling": False, "enforce_eager": True},
    ],
    ids=["async-graphs", "sync-eager"],
)
def test_engine_fails_the_nan_request_alone_on_the_gpu(nan_model, settings):  # noqa: F811
    common = dict(dtype="float32", gpu_memory_utilization=0.2, max_num_seqs=16, **settings)
    expected = LLM(nan_model, **common).generate([CLEAN, OTHER], GREEDY)
    llm = LLM(nan_model, **common)
    poisoned, other = llm.generate([POISONED, OTHER], GREEDY)
    assert poisoned.error == NONFINITE_ERROR and [c.finish_reason for c in poisoned.outputs] == ["error"]
    assert ids(other) == ids(expected[1])
    assert llm.generate([POISONED], GREEDY)[0].num_cached_tokens == 0
    assert ids(llm.generate([CLEAN], GREEDY)[0]) == ids(expected[0])
    stats = llm.engine.stats()
    assert stats.num_free_blocks == stats.num_blocks


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
@pytest.mark.parametrize("plane", [0, 1], ids=["keys", "values"])
def test_triton_attention_keeps_a_later_nan_from_earlier_queries(kv_dtype, plane):
    """The prefill tiles select a masked key's value away (0 * NaN is NaN), compiled for the GPU."""
    from model_optimizer.runtime.kernels.paged_attention import paged_attention
    from tests.runtime.kernels.paged_batches import make_paged_batch, relative_error

    batch = make_paged_batch(
        [(100, 300), (0, 64), (500, 1)],
        16,
        8,
        128,
        16,
        torch.bfloat16,
        device="cuda",
        kv_dtype=kv_dtype if kv_dtype != torch.bfloat16 else None,
        seed=3,
    )

    def attend():
        return paged_attention(
            batch.query,
            batch.kv_cache,
            batch.query_start_loc,
            batch.seq_lens,
            batch.block_tables,
            128**-0.5,
            max_query_len=batch.max_query_len,
            max_seq_len=batch.max_seq_len,
            k_scale=batch.k_scale,
            v_scale=batch.v_scale,
        )

    clean = attend().clone()
    poison_at = 100 + 200  # sequence 0: its new tokens 0..199 come before it
    block = int(batch.block_tables[0, poison_at // 16])
    batch.kv_cache[plane, block, poison_at % 16, :, :2] = float("nan")
    out = attend()
    assert torch.isfinite(out[:200]).all()
    assert relative_error(out[:200], clean[:200]) < 1e-6
    assert relative_error(out[300:], clean[300:]) < 1e-6  # the other sequences
    assert not torch.isfinite(out[200:300].flatten(1)).all(dim=1).any()  # tokens that see it are not clean
