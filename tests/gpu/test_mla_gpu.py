"""Multi-head latent attention on CUDA: the Triton kernel at DeepSeek's latent shape (kv_lora_rank 512,
qk_rope_head_dim 64) against the float32 torch reference, and a DeepSeek engine's decode graphs against
its eager steps. (bf16 agreement with transformers: test_families_gpu.py.)

Tolerance (relative error ||out - ref|| / ||ref||, reference in float32 on the same cache): bf16 1.5e-2,
as for the full-head kernel (test_kernels_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels.mla_reference import latent_attention_ref
from tests.runtime.kernels.latent_batches import make_batch
from tests.runtime.kernels.paged_batches import relative_error

TOLERANCE = 1.5e-2
MIXED = [(3000, 1), (0, 512), (1000, 300), (57, 1), (4000, 1), (0, 1), (2047, 65)] + [(700, 1)] * 20


def _run(batch, num_splits=None):
    from model_optimizer.runtime.kernels.mla_attention import latent_attention

    scale = 192**-0.5
    args = (batch.query, batch.cache, batch.query_start_loc, batch.seq_lens, batch.block_tables, scale)
    out = latent_attention(
        *args,
        batch.kv_lora_rank,
        max_query_len=batch.max_query_len,
        max_seq_len=batch.max_seq_len,
        k_scale=batch.k_scale,
        num_splits=num_splits,
    )
    ref = latent_attention_ref(batch.query.float(), batch.cache, *args[2:], batch.kv_lora_rank, batch.k_scale)
    return out.float(), ref


@pytest.mark.parametrize("num_heads", [16, 128])  # DeepSeek-V2-Lite's heads, V3's
@pytest.mark.parametrize("block_size", [16, 64])
def test_mixed_batch_at_deepseek_shapes(num_heads, block_size):
    batch = make_batch(MIXED, num_heads, 512, 64, block_size, torch.bfloat16, seed=num_heads, device="cuda")
    out, ref = _run(batch)
    assert relative_error(out, ref) < TOLERANCE


@pytest.mark.parametrize("num_splits", [None, 1, 8])
@pytest.mark.parametrize("seqs", [[(4095, 1)], [(2047, 1)] * 64], ids=["batch1", "batch64"])
def test_decode_batches(seqs, num_splits):
    batch = make_batch(seqs, 16, 512, 64, 16, torch.bfloat16, seed=len(seqs), device="cuda")
    out, ref = _run(batch, num_splits)
    assert relative_error(out, ref) < TOLERANCE


def test_fp8_cache():
    batch = make_batch(MIXED[:8], 16, 512, 64, 16, torch.bfloat16, fp8=True, seed=3, device="cuda")
    out, ref = _run(batch)
    assert relative_error(out, ref) < TOLERANCE


def test_cuda_graphs_give_the_same_tokens_as_eager(tiny_model):
    import random

    rng = random.Random(1)
    batch = [[rng.randrange(3, 1000) for _ in range(rng.randrange(1, 120))] for _ in range(12)]
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    folder = str(tiny_model("deepseek_v3"))
    eager = LLM(folder, dtype="bfloat16", enforce_eager=True, gpu_memory_utilization=0.2, max_num_seqs=32)
    graphed = LLM(folder, dtype="bfloat16", gpu_memory_utilization=0.2, max_num_seqs=32)
    assert graphed.runner.decode_runner is not None
    assert graphed.runner.kv_caches[0].shape[-1] == 32 + 8  # the latent row
    tokens = [[o.outputs[0].token_ids for o in llm.generate(batch, greedy)] for llm in (eager, graphed)]
    assert tokens[0] == tokens[1]
