"""Compile the quantized matmul's launch shapes for sm_90 (H100/H200) without a GPU.

Run by test_quant_compile_sm90.py in a subprocess without TRITON_INTERPRET. The sweep skips a
candidate the GPU compiler rejects, but the default rule must never pick one: this compiles each
distinct (format, tiles, warps, stages, one split or several) that `default_tiles` produces at
Qwen3-0.6B's and Llama-3.1-8B's shapes, with bf16 activations (`--all`: every sweep candidate too,
about 60 compiles). Prints one line per kernel with its shared memory; exit status 3 when Triton
has no ahead-of-time API.
"""

import sys

try:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

from model_optimizer.kernels.quant_kernels import KINDS, _quant_matmul_kernel
from model_optimizer.kernels.quant_tiles import ROW_BUCKETS, candidates, default_tiles

TARGET = GPUTarget("cuda", 90, 32)
SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (6144, 4096), (4096, 4096), (28672, 4096)]
ROWS = {1: 1, 16: 8, 64: 64, 512: 512}
SMEM_LIMIT = 227 * 1024  # an H100/H200 block's dynamic shared memory


def compile_tiles(kind: str, tiles, one_split: bool) -> dict:
    names = _quant_matmul_kernel.arg_names
    pointers = dict(
        x_ptr="*bf16",
        w_ptr={"int4": "*i32", "int8": "*i8", "fp8": "*fp8e4nv"}[kind],
        scales_ptr="*bf16" if kind == "int4" else "*fp32",
        zeros_ptr="*u8",
        bias_ptr="*bf16",
        out_ptr="*bf16",
        part_ptr="*fp32",
        count_ptr="*i32",
    )
    constexprs = dict(
        KIND=KINDS[kind],
        GROUP=128 if kind == "int4" else 1,
        HAS_BIAS=False,
        EVEN_K=True,
        DOT_DTYPE=tl.bfloat16,
        BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k,
        PLANES=tiles.planes or kind != "int4" or tiles.block_m == 1,
    )
    if one_split:
        constexprs["num_splits"] = 1
    signature = {n: "constexpr" if n in constexprs else pointers.get(n, "i32") for n in names}
    aligned = [n for n in names if n.endswith("_ptr") or n.startswith("stride_") or n in ("N", "K", "k_per_split")]
    source = ASTSource(
        _quant_matmul_kernel,
        signature,
        constexprs={(names.index(n),): v for n, v in constexprs.items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned},
    )
    options = {"num_warps": tiles.num_warps, "num_stages": tiles.num_stages}
    kernel = triton.compile(source, target=TARGET, options=options)
    return {"shared": kernel.metadata.shared}


def main() -> int:
    seen = set()
    for kind in KINDS:
        for n, k in SHAPES:
            for bucket in ROW_BUCKETS:
                m = ROWS[bucket]
                found = [default_tiles(kind, m, n, k, 132)]
                if "--all" in sys.argv:
                    found += candidates(kind, m, n, k, 132)
                for tiles in found:
                    key = (kind, tiles.block_m, tiles.block_n, tiles.block_k, tiles.num_warps, tiles.num_stages)
                    key += (tiles.split_k == 1, tiles.planes)
                    if key in seen:
                        continue
                    seen.add(key)
                    meta = compile_tiles(kind, tiles, tiles.split_k == 1)
                    status = "ok" if meta["shared"] <= SMEM_LIMIT else "TOO MUCH SHARED MEMORY"
                    print("quant", key, "shared", meta["shared"], status, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
