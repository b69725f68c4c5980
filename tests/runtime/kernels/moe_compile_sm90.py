"""Compile the fused MoE GEMM for sm_90 without a GPU and show whether weights move in 16-byte pieces:
both GEMMs (gate_up with its silu epilogue, down with the routing weights) at each default tile
and the widest sweep candidates, in bfloat16 (and float16 / float32 once each), with the shared
memory each needs (the sweep skips candidates a GPU cannot launch); the sum over k (16-byte loads too),
the alignment (one program; the parallel count and scatter at 128 and 256 experts, each block
height) and the routing kernel (bf16 logits of 128 experts, top 8; 256 experts) compile.

Run by test_moe_compile_sm90.py in a subprocess without TRITON_INTERPRET; one line per kernel.
Exit status 3 when this Triton has no usable ahead-of-time API.
"""

import sys

try:
    from tests.runtime.kernels.compile_sm90 import SMEM_LIMIT, compile_kernel
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

import triton.language as tl

from model_optimizer.runtime.kernels import moe_align
from model_optimizer.runtime.kernels.fused_moe import _align_kernel, _moe_gemm_kernel, _sum_over_k_kernel
from model_optimizer.runtime.kernels.moe_routing import (
    _norm_route_kernel,
    _softmax_topk_kernel,
    default_route_tiles,
)
from model_optimizer.runtime.kernels.moe_tiles import GEMM_CANDIDATES, default_tiles

DOTS = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}


def moe_gemm(dtype: str, block_m: int, tiles, gated: bool, block_expert: str = "*i32") -> None:
    pointers = dict(
        a_ptr=f"*{dtype}",
        w_ptr=f"*{dtype}",
        out_ptr=f"*{dtype}",
        sorted_ids_ptr="*i32",
        block_expert_ptr=block_expert,
        route_w_ptr="*fp32",
    )
    constexprs = dict(
        PAIRS_PER_A_ROW=8 if gated else 1,
        GATED=gated,
        WEIGHTED=not gated,
        EVEN_K=True,
        DOT_DTYPE=DOTS[dtype],
        BLOCK_M=block_m,
        BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k,
        bias_ptr=None,  # gpt-oss's expert biases and clamped SwiGLU off: the kernel every other model runs
        HAS_BIAS=False,
        SWIGLU_ALPHA=0.0,
        SWIGLU_LIMIT=0.0,
    )
    kernel = compile_kernel(
        _moe_gemm_kernel,
        pointers,
        constexprs,
        aligned_ints=("N", "K"),
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
    )
    shared = kernel.metadata.shared
    print("  shared", shared, "ok" if shared <= SMEM_LIMIT else "TOO MUCH SHARED MEMORY", flush=True)


for num_tokens in (1, 512, 4096):  # decode, a large decode batch, a prefill (Qwen3-30B-A3B: 128 experts, top 8)
    tiles = default_tiles(num_tokens, 128, 8)
    moe_gemm("bf16", tiles.block_m, tiles.gate_up, gated=True)
    moe_gemm("bf16", tiles.block_m, tiles.down, gated=False)
for tiles in (GEMM_CANDIDATES[3], GEMM_CANDIDATES[5]):  # the deepest K tile, the widest tile
    moe_gemm("bf16", 64, tiles, gated=True)
one_token = default_tiles(1, 128, 8)  # one token, all ids local: the router's int64 ids are the block experts
moe_gemm("bf16", one_token.block_m, one_token.gate_up, gated=True, block_expert="*i64")
moe_gemm("bf16", one_token.block_m, one_token.down, gated=False, block_expert="*i64")
moe_gemm("fp16", 16, default_tiles(1, 128, 8).gate_up, gated=True)
moe_gemm("fp32", 16, default_tiles(1, 128, 8).down, gated=False)
compile_kernel(
    _align_kernel,
    dict(ids_ptr="*i64", sorted_ids_ptr="*i32", block_expert_ptr="*i32"),
    dict(NUM_EXPERTS=128, EXPERTS_PAD=128, BLOCK_M=16, CHUNK=32),
    quiet=True,
)
print("_align_kernel compiled", flush=True)
for experts in (128, 256):  # Qwen3-30B-A3B, DeepSeek-V3-sized
    compile_kernel(
        moe_align._align_count_kernel,
        dict(ids_ptr="*i64", table_ptr="*i32"),
        dict(NUM_EXPERTS=experts, EXPERTS_PAD=experts, CHUNK=moe_align.CHUNK),
        quiet=True,
    )
    for block_m in (16, 32, 64, 128):  # every block height the tiles use
        compile_kernel(
            moe_align._align_scatter_kernel,
            dict(ids_ptr="*i64", table_ptr="*i32", sorted_ids_ptr="*i32", block_expert_ptr="*i32"),
            dict(
                NUM_EXPERTS=experts,
                EXPERTS_PAD=experts,
                BLOCK_M=block_m,
                CHUNK=moe_align.CHUNK,
                TILE=moe_align.TABLE_TILE,
                FILL_BLOCKS=moe_align.FILL_BLOCKS,
            ),
            quiet=True,
        )
print("_align_count_kernel and _align_scatter_kernel compiled", flush=True)
compile_kernel(
    _sum_over_k_kernel, dict(rows_ptr="*bf16", out_ptr="*bf16"), dict(TOP_K=8, BLOCK_H=1024), aligned_ints=("hidden",)
)
for experts, logits in ((128, "*bf16"), (256, "*fp32")):
    compile_kernel(
        _softmax_topk_kernel,
        dict(logits_ptr=logits, weights_ptr="*fp32", ids_ptr="*i64"),
        dict(NUM_EXPERTS=experts, EXPERTS_PAD=experts, TOP_K=8, K_PAD=8, RENORMALIZE=True),
        num_warps=1,
        quiet=True,
    )
print("_softmax_topk_kernel compiled", flush=True)
for experts, hidden in ((128, 2048), (8, 4096)):  # Qwen3-30B-A3B, Mixtral: their default launch shapes
    tiles = default_route_tiles(hidden, experts)
    pointers = {
        name: "*bf16" for name in ("x_ptr", "residual_ptr", "norm_w_ptr", "normed_ptr", "total_ptr", "router_ptr")
    }
    pointers.update(part_ptr="*fp32", count_ptr="*i32", weights_ptr="*fp32", ids_ptr="*i64", eps="fp32")
    top_k = min(8, experts // 4)
    compile_kernel(
        _norm_route_kernel,
        pointers,
        dict(
            HIDDEN=hidden,
            H_PAD=hidden,
            NUM_EXPERTS=experts,
            EXPERTS_PAD=experts,
            TOP_K=top_k,
            K_PAD=top_k,
            RENORMALIZE=True,
            NUM_SPLITS=tiles.splits,
            BLOCK_E=tiles.block_e,
            SLICE=hidden // tiles.splits,
        ),  # fmt: skip
        num_warps=tiles.num_warps,
        quiet=True,
    )
print("_norm_route_kernel compiled", flush=True)
