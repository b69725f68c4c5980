"""Triton kernels for the element-wise chains between the matmuls: RMSNorm (with its residual add)
and SiLU-and-mul.

Same contracts as the eager functions in layers/norm.py and layers/activation.py, which stay the CPU
path and the yardstick here, including where they round: the residual sum in the model dtype, the
statistics in float32, the normalized value rounded to the model dtype before the weight multiplies
it; silu(gate) rounded before it multiplies up. Rows may be strided (views); the last dimension must
be contiguous. New tensors come back, as from the eager functions.

Why not torch.compile (what layers/fusion.py used before): these chains were the only inductor
kernels of a decode step, yet compiling them was most of a cold start (dynamo traces again in
every process, so even a warm start paid for it: README "Start-up") and importing torch._inductor
alone costs seconds. Hand-written, they compile once per hidden
size and dtype and stay in Triton's on-disk cache (compile_cache.py). The token count is never a
kernel argument (it only sizes the grid), so one kernel serves every batch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import pdl

MAX_ROW_BLOCK = 65536
"""Widest row one RMSNorm program holds in registers (padded to a power of two)."""
SILU_BLOCK = 1024
"""Columns per SiLU-and-mul program: a decode step's few rows still spread over many programs."""
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def round_to(v, dtype: tl.constexpr):
    """float32 `v` rounded to `dtype` to nearest even, as torch rounds. On the GPU a plain cast does
    that already; the CPU interpreter's cast to bfloat16 truncates instead, so bfloat16 rounds here by
    its bits (adding half a unit minus one, plus the kept lowest bit) and then casts exactly."""
    if dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        v = tl.where(v != v, v, bits.to(tl.float32, bitcast=True))  # NaN stays NaN
    return v.to(dtype)


@triton.jit
def silu_mul(gate, up, dtype: tl.constexpr):
    """silu(gate) * up in `dtype` from float32 gate and up (each already a `dtype` value), rounded as the
    eager function rounds: silu before the product, then the product."""
    silu = round_to(gate / (1.0 + tl.exp(-gate)), dtype).to(tl.float32)
    return round_to(silu * up, dtype)


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    sum_ptr,
    eps,
    stride_x,
    stride_r,
    stride_out,
    stride_sum,
    HIDDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    TOP_K: tl.constexpr = 1,
    PDL: tl.constexpr = False,
):
    """One row; with TOP_K > 1, x holds TOP_K rows per row (a mixture of experts' weighted expert rows of
    a token), added in k order in float32 and rounded once, as fused_moe.sum_over_k, before the rest."""
    pdl.wait_then_release(PDL)
    row = tl.program_id(0).to(tl.int64)  # row * stride passes 2**31 at a few hundred thousand tokens
    cols = tl.arange(0, BLOCK)
    mask = cols < HIDDEN
    dtype = x_ptr.dtype.element_ty
    if TOP_K == 1:
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    else:
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in tl.static_range(TOP_K):
            acc += tl.load(x_ptr + (row * TOP_K + k) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        x = round_to(acc, dtype)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = round_to(x.to(tl.float32) + r.to(tl.float32), dtype)  # the sum in the model dtype, as transformers adds
        tl.store(sum_ptr + row * stride_sum + cols, x, mask=mask)
    h = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(h * h, axis=0) / HIDDEN + eps)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = round_to(h * inv, dtype).to(tl.float32)  # rounded to the model dtype before the weight, as the reference
    tl.store(out_ptr + row * stride_out + cols, round_to(w * normed, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_and_mul_kernel(
    gate_up_ptr,
    out_ptr,
    stride_in,
    stride_out,
    HALF: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    pdl.wait_then_release(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < HALF
    dtype = out_ptr.dtype.element_ty
    gate = tl.load(gate_up_ptr + row * stride_in + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * stride_in + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, silu_mul(gate, up, dtype), mask=mask)


def supports_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> bool:
    """Whether `rms_norm` takes these tensors (the layers run the eager function otherwise): a float
    x, a 1-D float weight as wide as its rows, at most MAX_ROW_BLOCK wide."""
    return (
        x.dim() >= 1
        and x.dtype in FLOAT_DTYPES
        and weight.dtype in FLOAT_DTYPES
        and weight.shape == (x.shape[-1],)
        and 0 < x.shape[-1] <= MAX_ROW_BLOCK
    )


def supports_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> bool:
    """As `supports_rms_norm`, with a residual of x's shape and dtype."""
    return residual.shape == x.shape and residual.dtype == x.dtype and supports_rms_norm(x, weight, eps)


def supports_silu_and_mul(gate_up: torch.Tensor) -> bool:
    """A float tensor whose last dimension splits into two equal halves."""
    return gate_up.dim() >= 1 and gate_up.dtype in FLOAT_DTYPES and gate_up.shape[-1] > 0 and gate_up.shape[-1] % 2 == 0


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * RMSNorm(x) over the last dimension, as layers.norm.rms_norm."""
    return _launch_rms_norm(x, None, weight, eps)[0]


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight * RMSNorm(x + residual), x + residual) with the sum in x's dtype, in one pass."""
    return _launch_rms_norm(x, residual, weight, eps)


def add_rms_norm_rows(
    rows: torch.Tensor, top_k: int, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`add_rms_norm` of x = the sum of each token's `top_k` consecutive rows of `rows` (tokens * top_k,
    hidden), added in k order in float32 and rounded once (fused_moe.sum_over_k), in one pass: the
    residual add after a mixture of experts without the separate sum."""
    if rows.shape[0] != residual.shape[0] * top_k:
        raise ValueError(f"add_rms_norm_rows needs {top_k} rows per residual row, got {rows.shape[0]} rows "
                         f"for {residual.shape[0]}")  # fmt: skip
    return _launch_rms_norm(rows, residual, weight, eps, top_k)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up = [gate | up] along the last dimension."""
    if not supports_silu_and_mul(gate_up):
        raise ValueError(f"silu_and_mul needs a float tensor with an even last dimension, got {_describe(gate_up)}")
    half = gate_up.shape[-1] // 2
    rows = _rows(gate_up)
    out = torch.empty(rows.shape[0], half, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0]:
        block = min(triton.next_power_of_2(half), SILU_BLOCK)
        grid = (rows.shape[0], triton.cdiv(half, block))
        _silu_and_mul_kernel[grid](
            rows, out, rows.stride(0), out.stride(0), HALF=half, BLOCK=block, num_warps=4, **pdl.options(out)
        )
    return out.view(*gate_up.shape[:-1], half)


def _launch_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, top_k: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """x holds `top_k` rows per output row (add_rms_norm_rows) or one."""
    if residual is None:
        ok = supports_rms_norm(x, weight, eps)
    elif top_k == 1:
        ok = supports_add_rms_norm(x, residual, weight, eps)
    else:  # add_rms_norm_rows checked the row counts
        ok = supports_rms_norm(x, weight, eps) and residual.dtype == x.dtype and residual.shape[-1] == x.shape[-1]
    if not ok:
        raise ValueError(
            f"rms_norm needs float x and residual of one shape and dtype with a 1-D weight as wide as the rows "
            f"(at most {MAX_ROW_BLOCK}); got x {_describe(x)}, weight {_describe(weight)}"
            + (f", residual {_describe(residual)}" if residual is not None else "")
        )
    hidden = x.shape[-1]
    rows = _rows(x)
    res = _rows(residual) if residual is not None else rows
    out_dtype = torch.promote_types(weight.dtype, x.dtype)  # weight * h.to(x.dtype) promotes as eager does
    num_rows = rows.shape[0] // top_k
    out = torch.empty(num_rows, hidden, dtype=out_dtype, device=x.device)
    total = torch.empty(num_rows, hidden, dtype=x.dtype, device=x.device) if residual is not None else out
    if num_rows:
        block = triton.next_power_of_2(hidden)
        _rms_norm_kernel[(num_rows,)](
            rows,
            res,
            weight.contiguous(),
            out,
            total,
            eps,
            rows.stride(0),
            res.stride(0),
            out.stride(0),
            total.stride(0),
            HIDDEN=hidden,
            BLOCK=block,
            HAS_RESIDUAL=residual is not None,
            TOP_K=top_k,
            num_warps=min(max(block // 256, 1), 8),  # 1024 wide: 4 warps, 8 bf16 (16 bytes) per thread
            **pdl.options(out),
        )
    shape = x.shape if top_k == 1 else residual.shape
    return out.view(shape), (total.view(shape) if residual is not None else x)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(rows, last dim) with unit stride along the last dimension; a view wherever possible."""
    rows = t.reshape(-1, t.shape[-1])
    return rows if rows.stride(-1) == 1 or rows.shape[-1] == 1 else rows.contiguous()


def _describe(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {t.dtype}"
