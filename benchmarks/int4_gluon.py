"""The Gluon int4 kernel (model_optimizer/runtime/kernels/int4_gluon.py) against cuBLAS bf16 and Triton's program.

For each of Llama-3.1-8B's linears (or --shapes) at each row count: cuBLAS bf16, our Triton int4 program
with the launch the tile table would give it without Gluon (`table_us`), and every Gluon launch shape of
`quant_tiles.gluon_candidates` (`default`: the one `quant_tiles.gluon_default` picks without a table),
each first checked against the dequantizing reference (relative error <= 2e-2) and then timed from
CUDA-graph replays. GPU only (Gluon has no interpreter):

    python benchmarks/int4_gluon.py --output int4_gluon.json [--rows 64 256] [--shapes 28672:4096]
    python benchmarks/int4_gluon.py --compile-only     # sm_90 facts per launch shape, no GPU needed

The tile table's gluon entries come from this script's results (README, "Quantized linear kernels").
"""

from __future__ import annotations

import collections
import functools
import json
import re
import sys
from pathlib import Path

from model_optimizer.runtime.kernels.int4_gluon import COUNTERS, GROUP, int4_gluon_matmul
from model_optimizer.runtime.kernels.quant_tile_specs import INT4_GLUON
from model_optimizer.runtime.kernels.quant_tiles import QuantTiles, gluon_candidates, gluon_default

sys.path.insert(0, str(Path(__file__).resolve().parent))


def name(tiles: QuantTiles) -> str:
    """A launch shape as results name it: weight rows x tokens, warps, stages, K splits."""
    return f"{tiles.block_n}x{tiles.block_m} w{tiles.num_warps} s{tiles.num_stages} k{tiles.split_k}"


def compile_facts(block_m: int, block_n: int, warps: int, stages: int, split: bool = False) -> dict:
    """One launch shape compiled for sm_90 (no GPU needed): registers, shared memory, the loop's MMA
    waits and whether anything spills to local memory (from the cubin Triton built, so the PTX version
    of a newer Triton never meets an older ptxas)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime" / "kernels"))
    from compile_sm90 import disassemble, int4_gluon  # the tests' sm_90 compile helpers

    kernel = int4_gluon(block_m, block_n, warps, stages, split)
    sass, regs = disassemble(kernel.asm["cubin"])
    return {
        "registers": regs,
        "shared_bytes": kernel.metadata.shared,
        "mma_waits": dict(collections.Counter(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\w+)", sass))),
        "spills": bool(sass.count("LDL") + sass.count("STL")),
    }


def _row(shape: str, m: int, sets: list, dense: list) -> dict:
    """cuBLAS bf16, our Triton program's launch (the table's, or the default rule's where the table names
    Gluon) and every Gluon launch shape at m rows (GPU us; wrong ones left out)."""
    import torch
    from int4_mma_variants import baseline

    x, ref, row = baseline(shape, m, sets, dense, GROUP)

    def launch(s, t: QuantTiles):  # noqa: ANN001, ANN202
        return int4_gluon_matmul(x, s[0].view(torch.int16), s[1], s[2], t.block_n, t.block_m, t.num_warps,
                                 t.num_stages, t.split_k)  # fmt: skip

    return time_launches(row, launch, ref, sets, m, int(shape.split(":")[0]), x.shape[1])


def time_launches(row: dict, launch, ref, sets: list, m: int, n: int, k: int) -> dict:  # noqa: ANN001
    """`row` with every Gluon launch shape of `gluon_candidates` at m rows of an N x K shape: each
    `launch(weight set, tiles)` checked against `ref` (relative error <= 2e-2), then timed from CUDA-graph
    replays (GPU us; wrong ones and failures under `errors`), the fastest (`best`) and the default rule's."""
    import torch
    from gpu_time import gpu_time_ms

    row |= {"variants": {}, "errors": {}}
    num_sms = torch.cuda.get_device_properties(ref.device).multi_processor_count
    for tiles in gluon_candidates(m, n, k, num_sms):
        call = functools.partial(launch, t=tiles)
        try:
            err = ((call(sets[0]).float() - ref).abs().max() / ref.abs().max()).item()
            if err > 2e-2:
                row["errors"][name(tiles)] = f"wrong: relative error {err:.3g}"
                continue
            row["variants"][name(tiles)] = round(1000 * gpu_time_ms(call, sets, stream_fallback=False), 2)
            torch.cuda.synchronize()
            if any(c.any() for c in COUNTERS.by_device.values()):
                row["errors"][name(tiles)] = "split-K counters left non-zero"
        except Exception as exc:  # out of shared memory or registers, a compile error
            row["errors"][name(tiles)] = f"{type(exc).__name__}: {str(exc)[-300:]}"
    best = min(row["variants"].items(), key=lambda kv: kv[1], default=(None, None))
    row["best"] = {"tiles": best[0], "us": best[1]}
    rule = gluon_default(m, n, k, num_sms)  # the launch of shapes without a table entry (none up to 16 rows)
    rule_name = name(rule) if rule is not None else None
    row["default"] = {"tiles": rule_name, "us": row["variants"].get(rule_name)}
    return row


def main() -> None:
    from int4_mma_variants import shape_arguments, sweep_shapes

    parser = shape_arguments(__doc__.splitlines()[0], [16, 64, 128, 256], need_output=False)
    parser.add_argument("--compile-only", action="store_true", help="sm_90 facts per launch shape, no GPU")
    args = parser.parse_args()
    if args.compile_only:
        for variant in INT4_GLUON:
            for split in (False, True):
                print(
                    variant, "split-K" if split else "one split", json.dumps(compile_facts(*variant, split)), flush=True
                )
        return
    if not args.output:
        parser.error("--output is required unless --compile-only")
    sweep_shapes(
        args.shapes,
        args.rows,
        _row,
        args.output,
        shown=("shape", "m", "bf16_us", "table_us", "best", "default", "errors"),
    )


if __name__ == "__main__":
    main()
