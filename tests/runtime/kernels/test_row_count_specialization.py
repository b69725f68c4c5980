"""The linear kernels take the step's row count as a plain argument, not one Triton specializes on (== 1,
a multiple of 16): a mixed prefill + decode step brings row counts that no decode graph's capture
compiled, and each new specialization would be a compile of a second or more in the middle of serving
(seen as a p90 TPOT of 40 ms against 12 at the median, H100, int4)."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.kernels.int4_gluon import int4_mma_kernel
from model_optimizer.runtime.kernels.quant_kernels import _quant_matmul_kernel
from model_optimizer.runtime.kernels.w8a8_kernels import _scale_int32_kernel


@pytest.mark.parametrize("kernel", [_quant_matmul_kernel, int4_mma_kernel, _scale_int32_kernel])
def test_the_row_count_is_not_specialized(kernel):
    if hasattr(kernel, "params"):  # compiled
        assert [p.name for p in kernel.params if p.do_not_specialize] == ["M"]
    else:  # under the Triton interpreter: the decorator's arguments
        assert kernel.kwargs["do_not_specialize"] == ["M"]
