"""The start-up warm-up compiles every Triton variant the first requests need: a prompt of a new
length and the decode after it compile nothing more, with a bf16 and with an fp8 KV cache (whose
real plane stride passes 2**31, which a scratch cache's does not)."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels.paged_attention_kernels import _paged_attention_kernel
from model_optimizer.runtime.kernels.rotary import _norm_rotate_store_kernel
from tests.runtime.server.test_process import REPO

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def compiled_variants(kernel) -> int:
    """How many specialisations of a Triton kernel this process compiled (all devices)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is not None:  # Triton 3.x: device -> (kernel cache, ...)
        return sum(len(entry[0]) for entry in caches.values())
    return sum(len(c) for c in kernel.cache.values())


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_first_requests_compile_nothing_after_start(kv_cache_dtype):
    llm = LLM(
        str(REPO / "benchmarks" / "configs" / "qwen3-0.6b"),
        load_format="dummy",
        dtype="bfloat16",
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=4096,
        gpu_memory_utilization=0.85,
    )
    try:
        before = compiled_variants(_paged_attention_kernel), compiled_variants(_norm_rotate_store_kernel)
        assert before[1] > 0  # Qwen3's layers store K and V from the rotary kernel (no store_kv launch)
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, detokenize=False)
        prompts = [[(i * 13 + j) % 5000 + 1 for j in range(n)] for i, n in enumerate((2224, 1754, 37, 300))]
        outputs = llm.generate(prompts, params)
        assert all(len(o.outputs[0].token_ids) == 8 for o in outputs)
        after = compiled_variants(_paged_attention_kernel), compiled_variants(_norm_rotate_store_kernel)
        assert after == before, (
            f"compiled during requests: attention {before[0]}->{after[0]}, rotary+store {before[1]}->{after[1]}"
        )
    finally:
        del llm
        torch.cuda.empty_cache()
