"""Compile the Gluon int4 kernel's launch shapes that the H200 tile table names, and that the default rule
takes for Llama-3.1-8B's linears at 17-256 rows, for sm_90, without a GPU.

Run by test_int4_gluon.py in a subprocess without TRITON_INTERPRET (Gluon has no interpreter). For each
distinct (tokens, weight rows, warps, stages, one split or several) of those launches it
checks the SASS: warp-group MMAs (HGMMA) in the main loop, nothing spilled to local memory, shared
memory within an H200 block's, and the MMAs left asynchronous (the loop waits with the launch's
`in_flight` groups outstanding, `WARPGROUP.DEPBAR.LE gsb0, 0x2` or `0x1`, never only with none). Then the dispatch as an
ahead-of-time build walks it (aot.compile_only, meta tensors, the H200 as target): `w4a16_linear` at
Llama-3.1-8B's gate_up launches the Gluon kernel at 64 and 256 rows, where the table names it, and
Triton's program at 16. Prints one line per kernel and per dispatch.
"""

import re
import sys

import torch
from compile_sm90 import SMEM_LIMIT, disassemble, int4_gluon, main_loop  # same folder: on sys.path when run

from model_optimizer.runtime.kernels import aot
from model_optimizer.runtime.kernels.int4_gluon import in_flight
from model_optimizer.runtime.kernels.quant_linear import w4a16_linear
from model_optimizer.runtime.kernels.quant_tiles import PACKAGED_TABLE, gluon_default, read_table

LLAMA = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
"""Llama-3.1-8B's linears (N, K): qkv, o, gate_up, down."""


def main() -> int:
    table = read_table(PACKAGED_TABLE)
    launches = [t for t in table["entries"].values() if t.backend == "gluon"]
    if not launches:
        print("no gluon entries in the table")
        return 1
    launches += [gluon_default(m, n, k, 132) for n, k in LLAMA for m in (32, 64, 100, 128, 200, 256)]
    shapes = sorted({(t.block_m, t.block_n, t.num_warps, t.num_stages, t.split_k > 1) for t in launches})
    failed = 0
    for block_m, block_n, warps, stages, split in shapes:
        kernel = int4_gluon(block_m, block_n, warps, stages, split)
        sass, regs = disassemble(kernel.asm["cubin"])
        loop = " ".join(main_loop(sass))
        problems = []
        if kernel.metadata.shared > SMEM_LIMIT:
            problems.append("TOO MUCH SHARED MEMORY")
        if sass.count("LDL") + sass.count("STL"):
            problems.append("SPILLS")
        if "HGMMA" not in loop:
            problems.append("NO HGMMA IN THE LOOP")
        waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x\w+)", sass)
        if f"0x{in_flight(block_m, block_n)}" not in waits:
            problems.append(f"MMAS WAITED FOR ONE BY ONE ({waits})")
        name = f"gluon {block_n}x{block_m} w{warps} s{stages} {'split' if split else 'one'}"
        print(name, f"shared={kernel.metadata.shared} regs={regs}", " ".join(problems) or "ok", flush=True)
        failed += bool(problems)
    n, k = 28672, 4096
    weight = (torch.empty(n, k // 8, dtype=torch.int32, device="meta"),
              torch.empty(n, k // 128, dtype=torch.bfloat16, device="meta"),
              torch.empty(n, k // 128, dtype=torch.uint8, device="meta"))  # fmt: skip
    for m, want in ((64, "int4_mma_kernel"), (256, "int4_mma_kernel"), (16, "_quant_matmul_kernel")):
        with aot.compile_only(aot.AotTarget()) as log:
            out = w4a16_linear(torch.empty(m, k, dtype=torch.bfloat16, device="meta"), *weight, 128, packing="planes")
        ok = out.shape == (m, n) and list(log.calls) == [want]
        print(f"dispatch m={m}", dict(log.calls), "ok" if ok else f"WANTED {want}", flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
