"""Compile the kernels a decode step launches with programmatic dependent launch (kernels/pdl.py) for
sm_90 without a GPU, with PDL on, and print where the griddepcontrol instructions sit in each PTX: how
many waits and releases, and which global memory instructions come before the first wait.

Run by test_pdl_compile_sm90.py in a subprocess without TRITON_INTERPRET; one line per kernel.
Exit status 3 when this Triton has no usable ahead-of-time API.
"""

import re
import sys

try:
    import triton.language as tl

    from tests.runtime.kernels.compile_sm90 import attention, quant_matmul, reduce_splits, rotate_store
    from tests.runtime.kernels.fused_ops_compile_sm90 import rms_norm, silu_and_mul
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

from model_optimizer.runtime.kernels import pdl

if not pdl.AVAILABLE:
    print("this Triton has no griddepcontrol instructions")
    sys.exit(3)


def report(name: str, kernel) -> None:
    ptx = kernel.asm["ptx"]
    head = ptx.split("griddepcontrol.wait")[0]
    before = sorted({m.group(0) for m in re.finditer(r"\b(ld\.global|st\.global|atom\.global|red\.global)", head)})
    print(
        f"{name}: waits {ptx.count('griddepcontrol.wait')} releases {ptx.count('griddepcontrol.launch_dependents')}"
        f" before wait [{' '.join(before)}]"
    )


report("rms_norm", rms_norm("bf16", 1024, residual=True, pdl=True))
report("silu_and_mul", silu_and_mul("bf16", 3072, pdl=True))
report("rotate_store", rotate_store("bf16", False, True, pdl=True))
report("attention", attention("bf16", "bf16", tl.bfloat16, 4, 1, 16, True, window=False, pdl=True))
report("reduce_splits", reduce_splits(pdl=True))
report("gemv_bf16", quant_matmul("bf16", 1, 16, 256, 4, num_stages=2, quiet=True, pdl=True))
report("gemv_bf16_gated", quant_matmul("bf16", 1, 16, 256, 4, num_stages=2, quiet=True, pdl=True, gated=True))
report("gemv_int4", quant_matmul("int4", 1, 64, 128, 4, quiet=True, pdl=True))
report("tile_fp8", quant_matmul("fp8", 16, 64, 256, 4, quiet=True, pdl=True))
report("gemv_bf16_off", quant_matmul("bf16", 1, 16, 256, 4, num_stages=2, quiet=True, pdl=False))
