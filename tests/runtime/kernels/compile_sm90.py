"""Compile every kernel configuration for an H100/H200 (sm_90) without a GPU: Triton front end plus ptxas.

Run by test_compile_sm90.py in a subprocess without TRITON_INTERPRET (the interpreter replaces
@triton.jit functions). Catches what the interpreter accepts but the GPU compiler rejects.
Prints one line per kernel; exit status 3 when this Triton has no usable ahead-of-time API.
"""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError as exc:
    print(f"no ahead-of-time compile API: {exc}")
    sys.exit(3)

from model_optimizer.runtime.kernels.paged_attention_kernels import _paged_attention_kernel, _reduce_splits_kernel
from model_optimizer.runtime.kernels.quant_kernels import KINDS, W8A8_KINDS, _quant_matmul_kernel
from model_optimizer.runtime.kernels.rotary import _norm_rotate_kernel, _norm_rotate_store_kernel
from model_optimizer.runtime.kernels.sampling import CHUNK, _gumbel_argmax_kernel
from model_optimizer.runtime.kernels.store_kv import _store_kv_kernel
from model_optimizer.runtime.kernels.w8a8_kernels import _quantize_rows_kernel

TARGET = GPUTarget("cuda", 90, 32)


SMEM_LIMIT = 227 * 1024  # an H100/H200 block's dynamic shared memory


def compile_kernel(
    fn,
    pointer_types: dict,
    constexprs: dict,
    aligned_ints: tuple[str, ...] = (),
    num_stages: int = 2,
    num_warps: int = 4,
    quiet: bool = False,
    gluon: bool = False,
    maxnreg: int = 0,
):
    """`fn` compiled for sm_90, with the divisibility-by-16 facts the launcher's JIT derives for pointers
    and strides (and for the integer arguments named in `aligned_ints`, as it does for any multiple of 16).
    `gluon`: fn is a `@gluon.jit` kernel. `maxnreg`: a register cap (0: none), as a launch passes it."""
    names = fn.arg_names
    signature = {n: "constexpr" if n in constexprs else pointer_types.get(n, "i32") for n in names}
    aligned = [
        n for n in names if n not in constexprs and (n.endswith("_ptr") or n.startswith("stride_") or n in aligned_ints)
    ]  # a pointer passed as None is a constexpr (gpt-oss's sinks_ptr off): no alignment fact
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as source_class
    else:
        source_class = ASTSource
    source = source_class(
        fn,
        signature,
        constexprs={(names.index(n),): v for n, v in constexprs.items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned},
    )
    options = {"num_warps": num_warps, "num_stages": num_stages, **({"maxnreg": maxnreg} if maxnreg else {})}
    kernel = triton.compile(source, target=TARGET, options=options)
    if quiet:
        return kernel
    ptx = kernel.asm["ptx"]
    # K/V must move in 16-byte pieces (cp.async or v4 loads), not element by element
    vectorized = "cp.async" in ptx or re.search(r"ld\.global\.\S*v4\.", ptx) is not None  # any cache hints
    print(fn.__name__, constexprs, "ptx chars", len(ptx), "vectorized" if vectorized else "SCALAR LOADS")
    return kernel


def _tool(name: str) -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def disassemble(cubin: bytes) -> tuple[str, int]:
    """(SASS text, registers per thread) of a cubin, by the nvdisasm and cuobjdump Triton ships."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([_tool("nvdisasm"), "-c", f.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    return sass, int(regs.group(1)) if regs else -1


def main_loop(sass: str) -> list[str]:
    """Opcodes of the longest loop body of a kernel's SASS (a backward branch to a label above it)."""
    ops: list[str] = []
    labels: dict[str, int] = {}
    best: list[str] = []
    for line in sass.splitlines():
        label = re.match(r"^\s*\.(L\w+):", line)
        if label:
            labels[label.group(1)] = len(ops)
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
        if not ins:
            continue
        words = ins.group(1).split()
        ops.append(words[1] if words[0].startswith("@") else words[0])
        branch = re.search(r"BRA\s+`?\(?\.(L\w+)", ins.group(1))
        if branch and branch.group(1) in labels and labels[branch.group(1)] < len(ops):
            body = ops[labels[branch.group(1)] :]
            best = body if len(body) > len(best) else best
    return best


def split_sum(sass: str) -> dict:
    """The split-K sum: the code from the split counter's atomic to the kernel's end (the last split adds
    the partials there), its loads, and the most loads issued before an add (loads in flight)."""
    ops = []
    for line in sass.splitlines():
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", line)
        if ins:
            ops.append(ins.group(1))
    tail = ops[ops.index("ATOMG") :] if "ATOMG" in ops else []
    run = in_flight = 0
    for op in tail:
        run = run + 1 if op == "LDG" else 0 if op == "FADD" else run
        in_flight = max(in_flight, run)
    return {"instructions": sum(op != "NOP" for op in tail), "loads": tail.count("LDG"), "loads_in_flight": in_flight}


def attention(
    q: str,
    kv: str,
    dot,
    splits: int,
    block_q: int,
    group_pad: int,
    decode: bool,
    window: bool,
    pdl: bool = False,
    softcap: float = 0.0,
):
    pointers = dict(
        out_ptr=f"*{q}",
        part_acc_ptr="*fp32",
        part_max_ptr="*fp32",
        part_sum_ptr="*fp32",
        q_ptr=f"*{q}",
        cache_ptr=f"*{kv}",
        qsl_ptr="*i32",
        seq_lens_ptr="*i32",
        block_tables_ptr="*i32",
        k_scale_ptr="*fp32",
        v_scale_ptr="*fp32",
        scale="fp32",
        q_scale="fp32",
    )
    constexprs = dict(
        GROUP=2,
        GROUP_PAD=group_pad,
        HEAD_DIM=128,
        HEAD_DIM_PAD=128,
        BLOCK_SIZE=16,
        BLOCK_Q=block_q,
        TILE_N=64,
        NUM_SPLITS=splits,
        USE_WINDOW=window,
        HAS_SCALES=kv == "fp8e4nv",
        DOT_DTYPE=dot,
        DECODE_ONLY=decode,
        PRESCALE_Q=kv == "fp8e4nv",
        SOFTCAP=softcap,
        sinks_ptr=None,  # gpt-oss's attention sinks off: a constexpr, as the launcher passes None
        HAS_SINKS=False,
        PDL=pdl,
    )
    return compile_kernel(_paged_attention_kernel, pointers, constexprs, quiet=pdl)


def quant_matmul(
    kind: str,
    block_m: int,
    block_n: int,
    block_k: int,
    split_k: int,
    num_stages: int = 3,
    num_warps: int = 4,
    w8a8: bool = False,
    quiet: bool = False,
    x_dtype: str = "bf16",
    pdl: bool = False,
    gated: bool = False,
    accs: int = 1,
    max_registers: int = 0,
):
    """One launch shape of the quantized matmul (CUDA-core GEMV, split-K dot, prefill tile) per weight
    format, as quant_matmul launches it on sm_90 (PTX widening); the compiled kernel
    (tests/runtime/kernels/quant_compile_sm90.py reads its shared memory and its SASS)."""
    x = ("i8" if kind == "int8" else "fp8e4nv") if w8a8 else x_dtype
    pointers = dict(
        x_ptr=f"*{x}",
        w_ptr={"int4": "*i16" if block_m > 1 else "*i32", "int8": "*i8", "fp8": "*fp8e4nv", "bf16": f"*{x_dtype}"}[
            kind
        ],
        scales_ptr=f"*{x_dtype}" if kind == "int4" else "*fp32",
        zeros_ptr="*u8",
        x_scales_ptr="*fp32",
        bias_ptr=f"*{x_dtype}",
        out_ptr=f"*{x_dtype}",
        part_ptr="*fp32",
        count_ptr="*i32",
    )
    constexprs = dict(
        KIND=KINDS[W8A8_KINDS[kind] if w8a8 else kind],
        GROUP=128 if kind == "int4" else 1,
        HAS_BIAS=False,
        EVEN_K=True,
        EVEN_N=True,
        DOT_DTYPE=(
            {"int8": tl.int8}.get(kind, tl.float8e4nv) if w8a8 else {"bf16": tl.bfloat16, "fp16": tl.float16}[x_dtype]
        ),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        USE_ASM=True,
        PREFETCH=block_m == 1 and num_stages >= 2 and (kind == "int4" or block_k <= 256),  # quant_matmul.prefetches
        PDL=pdl,
        GATED=gated,
        ACCS=accs,
    )
    if split_k == 1:  # the launcher's JIT specializes an integer argument equal to 1
        constexprs["num_splits"] = 1
    return compile_kernel(
        _quant_matmul_kernel,
        pointers,
        constexprs,
        aligned_ints=("N", "K", "k_per_split"),
        num_stages=num_stages,
        num_warps=num_warps,
        quiet=quiet,
        maxnreg=max_registers,
    )


def int4_gluon(block_m: int, block_n: int, num_warps: int, stages: int, split: bool = False):
    """The Gluon int4 kernel (kernels/int4_gluon.py) of one launch shape, compiled quietly."""
    from model_optimizer.runtime.kernels.int4_gluon import in_flight, int4_mma_kernel

    pointers = {"x_ptr": "*bf16", "w_ptr": "*i16", "scales_ptr": "*bf16", "zeros_ptr": "*u8", "out_ptr": "*bf16",
                "part_ptr": "*fp32", "count_ptr": "*i32"}  # fmt: skip
    consts = {"BLOCK_N": block_n, "BLOCK_M": block_m, "STAGES": stages, "SPLIT": split,
              "IN_FLIGHT": in_flight(block_m, block_n), "num_warps": num_warps}  # fmt: skip
    return compile_kernel(int4_mma_kernel, pointers, consts, ("N", "K"), num_warps=num_warps, quiet=True, gluon=True)


def reduce_splits(pdl: bool = False):
    """The merge of attention's split partials (Qwen3's heads, five splits)."""
    return compile_kernel(
        _reduce_splits_kernel,
        dict(out_ptr="*bf16", part_acc_ptr="*fp32", part_max_ptr="*fp32", part_sum_ptr="*fp32", qsl_ptr="*i32"),
        dict(HEAD_DIM=128, HEAD_DIM_PAD=128, NUM_SPLITS=5, SPLITS_PAD=8, PDL=pdl),
        quiet=pdl,
    )


def rotate_store(kv: str, quantize: bool, norm: bool, pdl: bool = False):
    """Rotary (with Qwen3's q/k norm) and the KV store in one launch."""
    return compile_kernel(
        _norm_rotate_store_kernel,
        dict(
            q_ptr="*bf16",
            k_ptr="*bf16",
            v_ptr="*bf16",
            q_out_ptr="*bf16",
            cache_ptr=f"*{kv}",
            slot_ptr="*i64",
            positions_ptr="*i64",
            cos_ptr="*fp32",
            sin_ptr="*fp32",
            q_weight_ptr="*bf16",
            k_weight_ptr="*bf16",
            k_scale_ptr="*fp32",
            v_scale_ptr="*fp32",
            eps="fp32",
        ),
        dict(
            NUM_Q_HEADS=16,
            Q_HEADS_PAD=16,
            NUM_K_HEADS=8,
            K_HEADS_PAD=8,
            HALF=64,
            HALF_PAD=64,
            HAS_NORM=norm,
            BLOCK_SIZE=16,
            QUANTIZE=quantize,
            HAS_SCALES=quantize,
            PDL=pdl,
        ),
        quiet=pdl,
    )


def main() -> int:
    # one configuration per feature, each feature in some decode and some prefill shape
    for q, dot, kv, splits, decode, softcap in (
        ("bf16", tl.bfloat16, "bf16", 1, True, 0.0),
        ("fp16", tl.float16, "fp16", 8, False, 50.0),  # Gemma 2's attention soft-capping
        ("bf16", tl.float16, "fp8e4nv", 8, True, 0.0),  # fp8 caches: fp16 dots (paged_attention._dot_dtype)
        ("bf16", tl.float16, "fp8e4nv", 1, False, 0.0),
    ):
        block_q, group_pad = (1, 16) if decode else (32, 2)
        attention(q, kv, dot, splits, block_q, group_pad, decode, window=not decode, softcap=softcap)
    reduce_splits()
    for kv, quantize in (("bf16", False), ("fp8e4nv", True)):
        compile_kernel(
            _store_kv_kernel,
            dict(
                key_ptr="*bf16",
                value_ptr="*bf16",
                cache_ptr=f"*{kv}",
                slot_ptr="*i64",
                k_scale_ptr="*fp32",
                v_scale_ptr="*fp32",
            ),
            dict(
                NUM_KV_HEADS=8,
                HEADS_PAD=8,
                HEAD_DIM=128,
                HEAD_DIM_PAD=128,
                BLOCK_SIZE=16,
                QUANTIZE=quantize,
                HAS_SCALES=quantize,
            ),
        )
    compile_kernel(
        _norm_rotate_kernel,
        dict(
            q_ptr="*bf16",
            k_ptr="*bf16",
            q_out_ptr="*bf16",
            k_out_ptr="*bf16",
            positions_ptr="*i64",
            cos_ptr="*fp32",
            sin_ptr="*fp32",
            q_weight_ptr="*bf16",
            k_weight_ptr="*bf16",
            eps="fp32",
        ),
        dict(NUM_Q_HEADS=16, Q_HEADS_PAD=16, NUM_K_HEADS=8, K_HEADS_PAD=8, HALF=64, HALF_PAD=64, HAS_NORM=True),
    )
    for kv, quantize, norm in (("bf16", False, True), ("fp8e4nv", True, False)):  # rotary + KV store, one launch
        rotate_store(kv, quantize, norm)
    sampling = dict(logits_ptr="*bf16", inv_temp_ptr="*fp32", seed_ptr="*i64", best_ptr="*fp32", index_ptr="*i64")
    sampling.update(token_ptr="*i64", ok_ptr="*i8", checked_ptr="*i64", count_ptr="*i32")
    finish = dict(
        CHUNKS_PAD=64, FINISH=True, HAS_CHECKED=True, NONFINITE=-1
    )  # 151,936 tokens: 38 chunks, the row finished in the kernel
    compile_kernel(
        _gumbel_argmax_kernel,
        {**sampling, "mask_ptr": "*i64", "mask_index_ptr": "*i64"},
        dict(CHUNK=CHUNK, HAS_MASK=False, **finish),
    )
    compile_kernel(  # with a grammar's token bitmask
        _gumbel_argmax_kernel,
        {**sampling, "mask_ptr": "*i32", "mask_index_ptr": "*i32"},
        dict(CHUNK=CHUNK, HAS_MASK=True, **finish),
    )
    for kind, block_m, block_n, block_k, split_k in (
        ("int4", 1, 64, 128, 4),
        ("int8", 1, 32, 256, 2),
        ("fp8", 16, 64, 256, 4),
        ("int4", 16, 64, 128, 4),
        ("int8", 64, 128, 128, 2),
        ("fp8", 128, 128, 64, 1),
        ("int4", 128, 128, 128, 1),
    ):
        quant_matmul(kind, block_m, block_n, block_k, split_k)
    quant_matmul("fp8", 16, 128, 256, 2, w8a8=True)
    quant_matmul("int8", 16, 128, 256, 2, w8a8=True)
    quant_matmul("int4", 16, 128, 128, 2, x_dtype="fp16")
    quant_matmul("bf16", 1, 32, 256, 4)  # the skinny bf16 linears (dense_linear)
    quant_matmul("bf16", 16, 128, 128, 2)
    for q_ptr, int8 in (("*fp8e4nv", False), ("*i8", True)):
        compile_kernel(
            _quantize_rows_kernel, dict(x_ptr="*bf16", q_ptr=q_ptr, scale_ptr="*fp32"), dict(BLOCK_K=4096, INT8=int8)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
