"""Compile the multi-head latent attention kernel for sm_90 without a GPU, with the shared memory each
configuration needs: decode (one pass and split keys, bf16 and fp8 caches) and prefill tiles at
DeepSeek-V2-Lite's and V3's latent shape (kv_lora_rank 512, qk_rope_head_dim 64), and the store of a
576-value latent row through the full-head store kernel.

Run by test_mla_compile_sm90.py in a subprocess without TRITON_INTERPRET; one line per kernel.
Exit status 3 when this Triton has no usable ahead-of-time API.
"""

import sys

try:
    from tests.runtime.kernels.compile_sm90 import SMEM_LIMIT, compile_kernel
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

import triton.language as tl

from model_optimizer.runtime.kernels.mla_attention import MlaTiles, _latent_attention_kernel, launch_shape
from model_optimizer.runtime.kernels.store_kv import _store_kv_kernel


def latent(cache: str, num_heads: int, max_query_len: int, splits: int) -> None:
    tiles = MlaTiles()
    block_h, block_q = launch_shape(num_heads, max_query_len, tiles)
    pointers = dict(
        out_ptr="*bf16",
        part_acc_ptr="*fp32",
        part_max_ptr="*fp32",
        part_sum_ptr="*fp32",
        q_ptr="*bf16",
        cache_ptr=f"*{cache}",
        qsl_ptr="*i32",
        seq_lens_ptr="*i32",
        block_tables_ptr="*i32",
        k_scale_ptr="*fp32",
        scale="fp32",
    )
    constexprs = dict(
        KV_LORA=512,
        KV_LORA_PAD=512,
        ROPE=64,
        ROPE_PAD=64,
        BLOCK_H=block_h,
        BLOCK_Q=block_q,
        BLOCK_SIZE=16,
        TILE_N=tiles.tile_n,
        NUM_SPLITS=splits,
        HAS_SCALE=cache == "fp8e4nv",
        DOT_DTYPE=tl.bfloat16,
        DECODE_ONLY=max_query_len == 1,
    )
    kernel = compile_kernel(
        _latent_attention_kernel, pointers, constexprs, num_warps=tiles.num_warps, num_stages=tiles.num_stages
    )
    shared = kernel.metadata.shared
    print("  shared", shared, "ok" if shared <= SMEM_LIMIT else "TOO MUCH SHARED MEMORY", flush=True)


for cache, heads, query_len, splits in (
    ("bf16", 16, 1, 1),  # V2-Lite decode, a full batch
    ("bf16", 16, 1, 8),  # V2-Lite decode at batch 1: keys split
    ("fp8e4nv", 16, 1, 4),
    ("bf16", 128, 1, 1),  # V3: 128 heads in blocks of 16
    ("bf16", 16, 512, 1),  # prefill chunks
    ("bf16", 128, 512, 1),
):
    latent(cache, heads, query_len, splits)
for cache, quantize in (("bf16", False), ("fp8e4nv", True)):  # one 576-value row per token, one "head"
    compile_kernel(
        _store_kv_kernel,
        dict(key_ptr="*bf16", value_ptr="*bf16", cache_ptr=f"*{cache}", slot_ptr="*i64")
        | dict(k_scale_ptr="*fp32", v_scale_ptr="*fp32"),
        dict(NUM_KV_HEADS=1, HEADS_PAD=1, HEAD_DIM=576, HEAD_DIM_PAD=1024, BLOCK_SIZE=16)
        | dict(QUANTIZE=quantize, HAS_SCALES=quantize),
    )
