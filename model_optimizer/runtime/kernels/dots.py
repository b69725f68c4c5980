"""The one `tl.dot` the kernels call: float32 operands stay float32.

Triton's default input precision for float32 operands is tf32 (10-bit mantissas): a float32 model
would then be as far from transformers' float32 as bf16 is close to it (the H200 saw 2.4e-3 in a
log-probability through the attention kernel). Engines run float32 for exactness, so its dots are
IEEE; bf16, fp16 and fp8 operands are untouched by the precision setting.
"""

import triton
import triton.language as tl


@triton.jit
def dot(a, b, acc, DOT_DTYPE: tl.constexpr):
    """a @ b (+ acc, which may be None), IEEE float32 products when DOT_DTYPE is float32."""
    if DOT_DTYPE == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)
