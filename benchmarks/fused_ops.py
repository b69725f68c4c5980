"""Bandwidth of the element-wise ops between the matmuls at prefill sizes, GPU only.

Each op runs on the same tensors as eager torch and as the Triton kernel the model runs on the GPU
(runtime/kernels/fused_ops.py for SiLU-and-mul, add + RMSNorm and RMSNorm; runtime/kernels/rotary.py for the qk-norm
+ rotary). Nothing here uses torch.compile: the engine no longer does. Each kernel compiles at the
first token count; the token count only sizes the grid, so later counts reuse it.
Shapes are Qwen3-0.6B's (hidden 1024, 16 query / 8 KV heads of 128, intermediate 3072), bf16.
GB/s counts the bytes an op must read and write once.

    PYTHONPATH=. python3 benchmarks/fused_ops.py --output $OUT/fused_ops_h200.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from common import RESULTS, environment, write_json  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 1024, 16, 8, 128, 3072


def cases(num_tokens: int):
    """(name, eager function, the model's Triton kernel, arguments, bytes moved)."""
    import torch

    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.kernels.rotary import norm_rotate
    from model_optimizer.runtime.layers.activation import silu_and_mul
    from model_optimizer.runtime.layers.norm import _add_rms_norm, _rms_norm
    from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding, norm_rotate_ref

    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    x, res = torch.randn(num_tokens, HIDDEN, **bf16), torch.randn(num_tokens, HIDDEN, **bf16)
    gate_up = torch.randn(num_tokens, 2 * INTERMEDIATE, **bf16)
    qkv = torch.randn(num_tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, **bf16)
    q, k, _ = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
    q, k = q.view(num_tokens, HEADS, HEAD_DIM), k.view(num_tokens, KV_HEADS, HEAD_DIM)  # strided, as in the model
    rotary = RotaryEmbedding(RopeConfig(HEAD_DIM, 40960, 1e6)).cuda()
    positions = torch.arange(num_tokens, device="cuda") % 512
    w = torch.ones(HEAD_DIM, **bf16)
    two = 2  # bytes per bf16 element
    return [
        (
            "silu_and_mul",
            silu_and_mul.__wrapped__,
            fused_ops.silu_and_mul,
            (gate_up,),
            two * num_tokens * 3 * INTERMEDIATE,
        ),
        (
            "add_rms_norm",
            _add_rms_norm.__wrapped__,
            fused_ops.add_rms_norm,
            (x, res, torch.ones(HIDDEN, **bf16), 1e-6),
            two * (num_tokens * 4 * HIDDEN + HIDDEN),
        ),
        (
            "rms_norm",
            _rms_norm.__wrapped__,
            fused_ops.rms_norm,
            (x, torch.ones(HIDDEN, **bf16), 1e-6),
            two * (num_tokens * 2 * HIDDEN + HIDDEN),
        ),
        (
            "qk_norm_rotate",
            norm_rotate_ref,
            norm_rotate,
            (q, k, positions, rotary.cos, rotary.sin, w, w, 1e-6),
            two * num_tokens * 2 * (HEADS + KV_HEADS) * HEAD_DIM,
        ),
    ]


def time_us(fn, args, repeats: int = 50) -> float:
    import torch

    for _ in range(3):
        fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / repeats


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="1,16,1024,8192,32768", help="comma list of token counts")
    p.add_argument("--output", default=str(RESULTS / "fused_ops_h200.json"))
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("fused_ops needs a CUDA GPU")
    rows = []
    for num_tokens in [int(t) for t in args.tokens.split(",")]:
        for name, eager, kernel, fn_args, num_bytes in cases(num_tokens):
            row = {"op": name, "num_tokens": num_tokens, "bytes": num_bytes}
            for way, fn in (("eager", eager), ("triton_kernel", kernel)):
                us = time_us(fn, fn_args)
                row[way] = {"us": round(us, 2), "gb_per_s": round(num_bytes / us / 1e3, 1)}
            row["speedup"] = round(row["eager"]["us"] / row["triton_kernel"]["us"], 2)
            rows.append(row)
            print(
                f"{name:15s} T={num_tokens:<6d} "
                + "  ".join(
                    f"{w} {row[w]['us']:8.1f} us {row[w]['gb_per_s']:7.1f} GB/s" for w in ("eager", "triton_kernel")
                )
                + f"  x{row['speedup']}",
                flush=True,
            )
    write_json(Path(args.output), {"benchmark": "fused_ops", "environment": environment(), "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
