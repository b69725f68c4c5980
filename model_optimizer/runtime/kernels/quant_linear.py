"""Quantized linear layers: one function per weight format, dispatching to the fastest path the device has.

    w8a16_linear(x, qweight, scales, bias=None,                        int8 per-channel, weight-only
                 dynamic_activations=False)                            (or W8A8 where allowed and faster)
    w4a16_linear(x, qweight, scales, zeros, group_size, bias=None,     int4 groups with zero points
                 packing="sequential")
    fp8_linear(x, qweight, scales, bias=None)                          e4m3 per-channel

x is (..., K) and the result (..., N) in x.dtype; layouts in `quant_reference`. On CUDA with Triton
and a bf16/fp16 input the Triton program runs (`quant_matmul`, launch shape per GPU and shape from
`quant_tiles`: split-K tiles for decode, larger tiles for prefill); everywhere else the dequantizing
torch reference. int4 kernels read the planes packing, which the layers make once at load time
(layers/quantization/method.py); weights in the checkpoint's sequential packing are repacked on
every call (correct, for tests and one-off calls).

fp8 from FP8_W8A8_MIN_ROWS rows on a GPU with fp8 tensor cores (sm_89+) may instead quantize the
activations per token (one Triton pass) and multiply e4m3 by e4m3 (W8A8: our Triton program or
`torch._scaled_mm`), as the compressed-tensors checkpoints we write declare ("dynamic" token
activations); below it the activations stay exact. int8 does the same (int8 x int8 MMA, from
INT8_W8A8_MIN_ROWS rows) only for layers whose scheme declares dynamic per-token int8 activations
(llm-compressor's W8A8 checkpoints, `--quantization int8-w8a8`): plain int8 stays weight-only, since
int8 activations without smoothing lose outlier channels. The tile table says which kind runs per shape.
No path reads tensor values on the host, so all of them run in CUDA graphs.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F

from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.kernels.quant_reference import (
    FP8_DTYPE,
    INT4_PACKINGS,
    fp8_linear_ref,
    fp8_w8a8_linear_ref,
    int8_w8a8_linear_ref,
    repack_int4,
    w4a16_linear_ref,
    w8a16_linear_ref,
)

FP8_W8A8_MIN_ROWS = int(os.environ.get("MOPT_FP8_W8A8_MIN_ROWS", "17"))
"""Rows (tokens) from which fp8 may quantize its activations (W8A8) where the table measured it faster
or the default rule takes it (quant_tiles.W8A8_MIN_BUCKET); below, weight-only (exact
activations). $MOPT_FP8_W8A8_MIN_ROWS=1 allows it at decode too."""
INT8_W8A8_MIN_ROWS = int(os.environ.get("MOPT_INT8_W8A8_MIN_ROWS", "17"))
"""The same for int8 layers with dynamic activations (w8a16_linear's `dynamic_activations`)."""
_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


def _check(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    weight_dtype: torch.dtype,
    packed_k: int,
) -> None:
    """Shapes and dtypes shared by the three formats (packed_k: in_features per stored column)."""
    if not x.is_floating_point() or x.dim() == 0:
        raise ValueError(f"x must be a floating-point (..., in_features) tensor, got {x.dtype} {tuple(x.shape)}")
    if qweight.dtype != weight_dtype or qweight.dim() != 2:
        raise ValueError(f"qweight must be 2-D {weight_dtype}, got {qweight.dtype} {tuple(qweight.shape)}")
    if qweight.shape[1] * packed_k != x.shape[-1]:
        raise ValueError(
            f"x has {x.shape[-1]} features but qweight {tuple(qweight.shape)} holds "
            f"{qweight.shape[1] * packed_k} per row"
        )
    if scales.shape[0] != qweight.shape[0]:
        raise ValueError(f"scales {tuple(scales.shape)} must have one row per output feature ({qweight.shape[0]})")
    if bias is not None and bias.shape != (qweight.shape[0],):
        raise ValueError(f"bias must be ({qweight.shape[0]},), got {tuple(bias.shape)}")


def _kernels(x: torch.Tensor):
    """quant_matmul's launcher where it runs: CUDA, Triton importable, half-precision input."""
    if not aot.on_gpu(x) or x.dtype not in _KERNEL_DTYPES:
        return None
    return triton_kernel("quant_matmul", "quant_matmul")


_scratch: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
_captured: dict[int, torch.Tensor] = {}
"""Scratch buffers some CUDA graph writes into, kept alive after a larger one replaces them."""


def _weight_scratch(device: torch.device, dtype: torch.dtype, numel: int) -> torch.Tensor | None:
    """One buffer per device and dtype for the "dequant" backend's whole weight, grown to the largest
    linear and reused by each in turn (they run one after another on the stream, graph replays too).
    None inside a CUDA-graph capture when it does not exist or is too small: it is never allocated
    there (the engine's warm-up forwards before each capture grow it)."""
    buf = _scratch.get((device, dtype))
    if buf is None or buf.numel() < numel:
        if aot.capturing():
            return None
        buf = _scratch[(device, dtype)] = torch.empty(numel, dtype=dtype, device=device)
    elif aot.capturing():
        _captured[buf.data_ptr()] = buf
    return buf


def _gpu_matmul(
    kind: str,
    rows: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    bias: torch.Tensor | None,
    w8a8_ok: bool = False,
) -> torch.Tensor:
    """(M, N) product on CUDA by the backend the tile table (or default rule) names for this shape:
    our Triton program, the Gluon int4 kernel (sm_90, bf16; elsewhere our program), `_scaled_mm` (fp8
    W8A8), `_int_mm` (int8 W8A8) or the weight dequantized whole into a scratch buffer and a dense matmul
    (prefill and large decode batches). Inside a CUDA-graph capture "dequant" runs
    only where the buffer already holds the weight; else the table's capture alternative (the fastest
    launch a graph can take) or the default rule's Triton tiles, never a table lookup by quant_matmul."""
    n = scales.shape[0]
    device_tiles = triton_kernel("quant_matmul", "device_tiles")
    tiles = device_tiles(rows, n, kind, group_size, w8a8_ok)
    if tiles.backend == "dequant":
        buf = _weight_scratch(rows.device, rows.dtype, n * rows.shape[1])
        if buf is not None:
            weight = triton_kernel("quant_matmul", "dequantize_weight")(
                qweight, scales, zeros, kind, group_size, rows.dtype, buf
            )
            return F.linear(rows, weight, bias)
        tiles = device_tiles(rows, n, kind, group_size, w8a8_ok, graph_safe=True)
    if tiles.backend == "gluon":
        fits = triton_kernel("int4_gluon", "fits")
        if fits is not None and fits(rows, scales, group_size, tiles.block_n):
            return triton_kernel("int4_gluon", "int4_gluon_matmul")(
                rows, qweight.view(torch.int16), scales, zeros, tiles.block_n, tiles.block_m, tiles.num_warps,
                tiles.num_stages, tiles.split_k, bias,
            )  # fmt: skip
        tiles = device_tiles(rows, n, kind, group_size, program_only=True)  # not bf16 on sm_90: our program
    if tiles.backend == "scaled_mm":
        return _scaled_mm_w8a8(rows, qweight, scales, bias)
    if tiles.backend == "int_mm":
        return triton_kernel("quant_matmul", "int_mm_w8a8")(rows, qweight, scales, bias)
    return triton_kernel("quant_matmul", "quant_matmul")(rows, qweight, scales, zeros, kind, group_size, bias, tiles)


def gated_gemv(
    kind: str, x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor | None:
    """silu(gate) * up of x @ dequantize([gate | up]).T (+ bias), (..., N / 2), int8 or fp8 weights with
    per-channel scales, in the GEMV's own launch where the tile table runs our weight-only GEMV for this
    shape (one row on CUDA with Triton); None elsewhere, and the caller takes the projection then
    `silu_and_mul`. Not for int4: its gated GEMV measured slower than the two launches on the H200
    (README, "Quantized linear kernels"), though the kernel computes it alike."""
    n = scales.shape[0]
    matmul = _kernels(x)
    if matmul is None or x.numel() != x.shape[-1]:
        return None
    if kind == "fp8" and not _has_fp8_tensor_cores(x.device.index or 0):
        return None  # fp8_linear takes the reference there
    rows = _rows(x)
    tiles = triton_kernel("quant_matmul", "device_tiles")(rows, n, kind)
    if not triton_kernel("quant_matmul", "gates")(tiles, n):
        return None
    out = matmul(rows, qweight, scales, None, kind, 0, bias, tiles, gated=True)
    return out.view(*x.shape[:-1], n // 2)


def int4_kernel_packing(device: torch.device, dtype: torch.dtype, group_size: int, in_features: int) -> bool:
    """Whether w4a16_linear runs the GPU kernels for a layer (which read the planes packing): CUDA with
    Triton, a bf16/fp16 model, groups and in_features made of 128-column blocks."""
    if not aot.gpu_device(device) or dtype not in _KERNEL_DTYPES or group_size % 128 or in_features % 128:
        return False
    return triton_kernel("quant_matmul", "quant_matmul") is not None


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])  # (M, K); a view for the usual contiguous activations


def _w8a8_shape(rows: torch.Tensor, qweight: torch.Tensor, min_rows: int) -> bool:
    """Whether a W8A8 launch may serve these rows: enough of them, and N and K multiples of 16 (the MMA's)."""
    n, k = qweight.shape
    return rows.shape[0] >= min_rows and n % 16 == 0 and k % 16 == 0


def w8a16_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None = None,
    dynamic_activations: bool = False,
) -> torch.Tensor:
    """x @ (qweight * scales[:, None]).T (+ bias): int8 (N, K) weights, float32 (N,) scales.

    `dynamic_activations` (the layer's scheme declares per-token int8 activations): from
    INT8_W8A8_MIN_ROWS rows, where the tile table measured it faster or the default rule takes it
    (quant_tiles.W8A8_MIN_BUCKET), x is quantized per token
    (quant_reference.quantize_rows_int8_ref) and multiplied int8 by int8 (`int8_w8a8_linear_ref`);
    elsewhere on the GPU the activations stay exact. Without the kernels (the CPU) such layers always
    quantize them, as the checkpoint's scheme says, so an accuracy measured there includes that cost."""
    _check(x, qweight, scales, bias, torch.int8, 1)
    if scales.dim() != 1:
        raise ValueError(f"int8 scales must be per output channel (N,), got {tuple(scales.shape)}")
    matmul = _kernels(x)
    if matmul is None:
        if dynamic_activations:
            return int8_w8a8_linear_ref(x, qweight, scales, bias)
        return w8a16_linear_ref(x, qweight, scales, bias)
    rows = _rows(x)
    w8a8_ok = dynamic_activations and _w8a8_shape(rows, qweight, INT8_W8A8_MIN_ROWS)
    out = _gpu_matmul("int8", rows, qweight, scales, None, 0, bias, w8a8_ok)
    return out.view(*x.shape[:-1], out.shape[-1])


def w4a16_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    packing: str = "sequential",
) -> torch.Tensor:
    """x @ ((q - zeros) * scales).T per group of `group_size` along K (+ bias): int32 (N, K // 8) packed
    nibbles (`packing`: quant_reference.INT4_PACKINGS), scales (N, K // G) in the model dtype, zeros
    uint8 (N, K // G)."""
    _check(x, qweight, scales, bias, torch.int32, 8)
    k = x.shape[-1]
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size must be a positive divisor of in_features {k}, got {group_size}")
    if scales.shape != (qweight.shape[0], k // group_size) or zeros.shape != scales.shape:
        raise ValueError(
            f"scales and zeros must be {(qweight.shape[0], k // group_size)}, "
            f"got {tuple(scales.shape)} and {tuple(zeros.shape)}"
        )
    if packing not in INT4_PACKINGS:
        raise ValueError(f"int4 packing must be one of {', '.join(INT4_PACKINGS)}, got {packing!r}")
    # the kernels read 128-column blocks inside one group
    matmul = _kernels(x) if group_size % 128 == 0 and x.shape[-1] % 128 == 0 else None
    if matmul is None:
        return w4a16_linear_ref(x, qweight, scales, zeros, group_size, bias, packing)
    planes = repack_int4(qweight, packing, "planes")
    out = _gpu_matmul("int4", _rows(x), planes, scales, zeros, group_size, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


def _has_fp8_tensor_cores(device_index: int) -> bool:
    return aot.device_facts(device_index)[2] >= (8, 9) if aot.building() else _cuda_fp8(device_index)


@functools.cache
def _cuda_fp8(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def fp8_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ (qweight * scales[:, None]).T (+ bias): float8_e4m3fn (N, K) weights, float32 (N,) scales.

    Below FP8_W8A8_MIN_ROWS rows the weights are dequantized inside the Triton program (the activations
    stay exact); from there, on sm_89+ with a bf16 input, the tile table or the default rule may pick
    W8A8: activations quantized per token, e4m3 x e4m3 (one more rounding of x, about 2% relative error
    on Gaussian data). Without the kernels (the CPU) the activations are always quantized per token, as
    a served batch's are and as vLLM's fp8 (dynamic) layers on Hopper do, so an accuracy measured there
    (`mopt quantize`'s verdict) includes that cost; a GPU without fp8 tensor cores stays weight-only.
    """
    _check(x, qweight, scales, bias, FP8_DTYPE, 1)
    if scales.dim() != 1:
        raise ValueError(f"fp8 scales must be per output channel (N,), got {tuple(scales.shape)}")
    matmul = _kernels(x)
    if matmul is None:
        return fp8_w8a8_linear_ref(x, qweight, scales, bias)
    if not _has_fp8_tensor_cores(x.device.index or 0):
        return fp8_linear_ref(x, qweight, scales, bias)
    rows = _rows(x)
    w8a8_ok = x.dtype == torch.bfloat16 and _w8a8_shape(rows, qweight, FP8_W8A8_MIN_ROWS)
    out = _gpu_matmul("fp8", rows, qweight, scales, None, 0, bias, w8a8_ok)
    return out.view(*x.shape[:-1], out.shape[-1])


def _scaled_mm_w8a8(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
    """(M, K) bf16 -> per-token fp8 (one Triton pass) -> `_scaled_mm` with row-wise scales -> bf16 (M, N)."""
    quantize_rows = triton_kernel("quant_matmul", "quantize_rows_fp8")
    x_q, x_scales = quantize_rows(x)
    # _scaled_mm wants the second operand column-major: the (N, K) row-major weight transposed is
    out = torch._scaled_mm(
        x_q, qweight.t(), scale_a=x_scales, scale_b=scales.float().view(1, -1), out_dtype=torch.bfloat16
    )
    return out if bias is None else out.add_(bias)
