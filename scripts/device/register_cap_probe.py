"""Probe: the tile table's decode launches under register caps (ptxas maxnreg), timed from graph replays.

    python3 scripts/device/register_cap_probe.py OUT.json [--table TABLE.json] [--cases int8:1,fp8:1]
        [--caps 0,80,72] [--gemv-only] [--qwen]

For each Llama-3.1-8B linear (and Qwen3-0.6B's with --qwen) and each format:rows case, the table's launch
for this GPU is timed as it is and under register caps (`max_registers`), each at the table's split and at
twice it (more programs for the SMs the smaller programs now share), after a check against the
dequantized reference; --gemv-only: only where the table runs the one-row GEMV. Writes every timing with
the compile's registers and spills, and with --table a copy of the packaged table whose entries are the
fastest variant where it beat the table's own launch by 3% or more (for a decode A/B through
MOPT_QUANT_TILES).
"""

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_time import gpu_time_ms, sets_for  # noqa: E402
from quant_kernels import _dequantized, _runner, make_weights  # noqa: E402
from quant_sass import QWEN_SHAPES, SHAPES  # noqa: E402  (Llama-3.1-8B's and Qwen3-0.6B's linears)

from model_optimizer.runtime.kernels.quant_tiles import PACKAGED_TABLE, lookup, table_key  # noqa: E402

MIN_GAIN = 0.03


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def variants(tiles, caps: list[int]):
    splits = sorted({tiles.split_k, min(2 * tiles.split_k, 16)})
    return [replace(tiles, max_registers=cap, split_k=s) for cap in caps for s in splits]


def compiled(kernel) -> str:
    """Registers and spills of the compile a launch returned."""
    return f"{kernel.n_regs} regs, {kernel.n_spills} spills" if kernel is not None else "?"


def launch_of(run, x, ws):
    """The CompiledKernel of our program's launch in run(x, *ws) (the last one Triton's launcher made)."""
    from model_optimizer.runtime.kernels import quant_kernels

    kernel = quant_kernels._quant_matmul_kernel
    seen = []
    original = kernel.run

    def spy(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    kernel.run = spy
    try:
        run(x, *ws)
    finally:
        kernel.run = original
    return seen[-1] if seen else None


def main() -> None:
    out = Path(sys.argv[1])
    gpu = torch.cuda.get_device_name()
    cases = [
        (c.split(":")[0], int(c.split(":")[1]))
        for c in option("--cases", "int4:1,int4:8,int4:16,fp8:1,int8:1").split(",")
    ]
    caps = [int(c) for c in option("--caps", "0,96,80,72,64").split(",")]
    shapes = {**SHAPES, **(QWEN_SHAPES if "--qwen" in sys.argv else {})}
    rows, better = [], {}
    for kind, m in cases:
        for linear, (n, k) in shapes.items():
            tiles = lookup(gpu, kind, m, n, k, graph_safe=True)
            if tiles is None or tiles.backend != "triton" or ("--gemv-only" in sys.argv and tiles.block_m != 1):
                print(f"{kind} m{m} {linear}: table launch {tiles}: skipped", flush=True)
                continue
            x = torch.randn(m, k, device="cuda").bfloat16()
            nbytes = n * k // (2 if kind == "int4" else 1)
            sets = make_weights(kind, n, k, sets_for(nbytes))
            sets = [(w[0], w[1], w[2] if kind == "int4" else None) for w in sets]
            want = x.float() @ _dequantized(kind, sets[0]).T
            base = None
            for t in variants(tiles, caps):
                run = _runner(kind, t)
                try:
                    got = run(x, *sets[0]).float()
                except Exception as e:  # noqa: BLE001 (a split the launcher refuses: recorded, not fatal)
                    print(f"{kind} m{m} {linear} {t}: {type(e).__name__}: {e}", flush=True)
                    continue
                err = ((got - want).norm() / want.norm()).item()
                if err > 1e-2:
                    raise SystemExit(f"{kind} m{m} {linear} {t}: relative error {err}")
                us = gpu_time_ms(lambda ws, run=run, x=x: run(x, *ws), sets, target_ms=4.0, samples=3) * 1000
                if base is None:
                    base = us
                row = {"kind": kind, "m": m, "linear": linear, "tiles": asdict(t), "us": round(us, 2),
                       "vs_table": round(us / base, 3), "compiled": compiled(launch_of(run, x, sets[0]))}  # fmt: skip
                rows.append(row)
                print(f"{kind} m{m:<3} {linear:8s} cap {t.max_registers:3d} split {t.split_k:2d}: {us:7.2f} us "
                      f"({us / base:.3f}x)  {row['compiled']}", flush=True)  # fmt: skip
                key = table_key(kind, m, n, k)
                if us < base * (1 - MIN_GAIN) and (key not in better or us < better[key][1]):
                    better[key] = (t, us)
            del sets
    out.write_text(json.dumps({"gpu": gpu, "rows": rows,
                               "better": {k: {"tiles": asdict(t), "us": round(u, 2)} for k, (t, u) in better.items()}},
                              indent=1))  # fmt: skip
    if "--table" in sys.argv:
        table = json.loads(PACKAGED_TABLE.read_text())
        for key, (t, us) in better.items():
            table["entries"][key] = asdict(t)
            table["us"][key] = round(us, 2)
        Path(sys.argv[sys.argv.index("--table") + 1]).write_text(json.dumps(table, indent=1))
    for key, (t, us) in better.items():
        print("better", key, t.max_registers, t.split_k, us)


if __name__ == "__main__":
    main()
