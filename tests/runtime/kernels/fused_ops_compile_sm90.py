"""Compile the fused element-wise kernels for sm_90 without a GPU and show whether rows move in
16-byte pieces: the hidden sizes of Qwen3-0.6B (1024) and Llama-8B (4096), the intermediate sizes
3072 and 14336, in bfloat16 (and float16 / float32 once each for the rounding branches).

Run by test_fused_ops_compile_sm90.py in a subprocess without TRITON_INTERPRET; one line per kernel.
Exit status 3 when this Triton has no usable ahead-of-time API.
"""

import sys

try:
    from tests.runtime.kernels.compile_sm90 import compile_kernel
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

import triton

from model_optimizer.runtime.kernels.fused_ops import SILU_BLOCK, _rms_norm_kernel, _silu_and_mul_kernel


def rms_norm(dtype: str, hidden: int, residual: bool, top_k: int = 1, pdl: bool = False):
    block = triton.next_power_of_2(hidden)
    pointers = dict(x_ptr=f"*{dtype}", residual_ptr=f"*{dtype}", weight_ptr=f"*{dtype}", out_ptr=f"*{dtype}")
    pointers.update(sum_ptr=f"*{dtype}", eps="fp32")
    constexprs = dict(HIDDEN=hidden, BLOCK=block, HAS_RESIDUAL=residual, TOP_K=top_k, PDL=pdl)
    return compile_kernel(_rms_norm_kernel, pointers, constexprs, num_warps=min(max(block // 256, 1), 8), quiet=pdl)


def silu_and_mul(dtype: str, half: int, pdl: bool = False):
    block = min(triton.next_power_of_2(half), SILU_BLOCK)
    return compile_kernel(
        _silu_and_mul_kernel,
        dict(gate_up_ptr=f"*{dtype}", out_ptr=f"*{dtype}"),
        dict(HALF=half, BLOCK=block, PDL=pdl),
        quiet=pdl,
    )


if __name__ == "__main__":
    for hidden in (1024, 4096):
        rms_norm("bf16", hidden, residual=True)
    rms_norm("bf16", 1024, residual=False)
    rms_norm("fp16", 1024, residual=True)
    rms_norm("fp32", 1024, residual=True)
    rms_norm("bf16", 2048, residual=True, top_k=8)  # a mixture of experts' rows summed in the norm
    for half in (3072, 14336):
        silu_and_mul("bf16", half)
    silu_and_mul("fp32", 3072)
