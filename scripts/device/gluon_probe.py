"""Probe: one int4 Gluon launch or cuBLAS bf16 at one shape, called a few times (for ncu --launch-skip).

    python3 scripts/device/gluon_probe.py gluon M N K BLOCK_N BLOCK_M WARPS STAGES SPLITS
    python3 scripts/device/gluon_probe.py bf16 M N K

scripts/device/gluon_ncu.sh runs it under Nsight Compute.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from quant_kernels import make_weights  # noqa: E402

from model_optimizer.runtime.kernels.int4_gluon import int4_gluon_matmul  # noqa: E402


def main() -> None:
    kind, m, n, k, *tiles = sys.argv[1:]
    m, n, k = int(m), int(n), int(k)
    x = torch.randn(m, k, device="cuda").bfloat16()
    if kind == "bf16":
        w = torch.randn(n, k, device="cuda").bfloat16()
        for _ in range(5):
            torch.nn.functional.linear(x, w)
    else:
        block_n, block_m, warps, stages, splits = map(int, tiles)
        lanes, scales, zeros = make_weights("int4", n, k, 1)[0][:3]
        for _ in range(5):
            int4_gluon_matmul(x, lanes.view(torch.int16), scales, zeros, block_n, block_m, warps, stages, splits)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
