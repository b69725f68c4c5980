"""Paged attention on the GPU: picks tile sizes and the split-KV path, then launches the Triton programs.

Same inputs and result as `reference.paged_attention_ref`, so the runner can swap one for the
other. Everything here is computed from tensor shapes and Python ints, never from tensor values,
so a call can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import aot, pdl
from model_optimizer.runtime.kernels.formats import FP8_DTYPE
from model_optimizer.runtime.kernels.paged_attention_kernels import _paged_attention_kernel, _reduce_splits_kernel

MIN_ROWS = 16  # tl.dot needs at least 16 rows: small GQA groups are padded with masked heads
MAX_SPLITS = 32
SPLIT_MIN_KEYS = 64  # one key tile: splits of one tile each measured fastest at batch 1 (README)
SPLIT_MIN_CONTEXT = 256  # with a known shorter max_seq_len, one pass per sequence is enough


def _dot_dtype(dtype: torch.dtype, fp8_cache: bool = False):
    """Operand type of tl.dot: the query's, except bf16 under the interpreter, whose bf16 dot is wrong,
    and fp16 over an fp8 cache: e4m3 -> fp16 is one conversion instruction per two values and exact, while
    e4m3 -> bf16 goes through fp16 and fp32; with bf16 operands the fp8 decode read its half-size cache
    far slower than the bf16 cache (benchmarks/attention_kernels.py; README "Quantize", fp8 cache)."""
    if fp8_cache:
        return tl.float16
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[dtype]


def _num_sms(device_index: int | None) -> int:
    target = aot.building()
    if target is not None:  # compiling ahead of time for that GPU (aot.py)
        return target.num_sms
    return _cuda_num_sms(device_index)


@functools.lru_cache(maxsize=8)
def _cuda_num_sms(device_index: int | None) -> int:
    if not torch.cuda.is_available():
        return 132  # interpreter: any plausible figure
    return torch.cuda.get_device_properties(device_index or 0).multi_processor_count


def choose_num_splits(
    num_seqs: int, num_kv_heads: int, max_query_len: int, max_seq_len: int | None, num_sms: int
) -> int:
    """Split-KV heuristic: only for decode batches too small to fill the GPU, and long enough contexts."""
    programs = num_seqs * num_kv_heads
    if max_query_len != 1 or programs >= num_sms:
        return 1
    if max_seq_len is not None and max_seq_len < SPLIT_MIN_CONTEXT:
        return 1
    splits = triton.cdiv(2 * num_sms, programs)  # about two waves of programs
    if max_seq_len is not None:
        splits = min(splits, triton.cdiv(max_seq_len, SPLIT_MIN_KEYS))
    return max(1, min(splits, MAX_SPLITS))


@dataclass(frozen=True)
class Tiles:
    """Launch shape of the attention kernel: what benchmarks/attention_kernels.py sweeps."""

    max_rows: int = 64
    """Query rows (tokens x heads of a GQA group) per program in prefill tiles (a power of two)."""
    tile_n: int | None = None
    """Keys per inner-loop step; None: 64, or 32 for head_dim above 128."""
    num_warps: int = 4
    num_stages: int = 2


def _check_inputs(query, kv_cache, query_start_loc, seq_lens, block_tables) -> None:
    if query.dim() != 3:
        raise ValueError(f"query must be (num_tokens, num_heads, head_dim), got {tuple(query.shape)}")
    if kv_cache.dim() != 5 or kv_cache.shape[0] != 2:
        raise ValueError(
            f"kv_cache must be (2, num_blocks, block_size, kv_heads, head_dim), got {tuple(kv_cache.shape)}"
        )
    if query.shape[2] != kv_cache.shape[4]:
        raise ValueError(f"query head_dim {query.shape[2]} differs from the cache's {kv_cache.shape[4]}")
    if query.shape[1] % kv_cache.shape[3]:
        raise ValueError(f"num_heads {query.shape[1]} must be a multiple of num_kv_heads {kv_cache.shape[3]}")
    num_seqs = seq_lens.shape[0]
    if query_start_loc.shape != (num_seqs + 1,) or block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(
            f"need query_start_loc ({num_seqs + 1},) and block_tables ({num_seqs}, max_blocks) for "
            f"{num_seqs} sequences, got {tuple(query_start_loc.shape)} and {tuple(block_tables.shape)}"
        )
    for name, tensor in (("query_start_loc", query_start_loc), ("seq_lens", seq_lens), ("block_tables", block_tables)):
        if tensor.dtype != torch.int32:
            raise ValueError(f"{name} must be int32, got {tensor.dtype}")
    if query.stride(2) != 1 or kv_cache.stride(4) != 1 or block_tables.stride(1) != 1:
        raise ValueError("query, kv_cache and block_tables must be contiguous in their last dimension")
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"query dtype must be float16, bfloat16 or float32, got {query.dtype}")


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    *,
    max_query_len: int | None = None,
    max_seq_len: int | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
    tiles: Tiles | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of a mixed batch (prefill chunks and decode tokens) over the paged cache.

    Arguments as in `paged_attention_ref`. Hints (Python ints the runner knows; never read from
    tensors here): max_query_len, an upper bound of the new tokens of any sequence, sizes the
    query tiles (None: num_tokens, correct but slower); 1 promises a decode-only batch and
    selects one program per sequence. max_seq_len tunes the split-KV choice. num_splits forces the
    flash-decoding path (> 1) or the single pass (1); None lets `choose_num_splits` decide.
    out: optional preallocated result (num_tokens, num_heads, head_dim), e.g. a CUDA-graph buffer.
    tiles: launch shape override (benchmarks); None takes the defaults of `Tiles`.
    softcap: attention logit soft-capping (Gemma 2), as in `paged_attention_ref`; a compile-time constant
    of the kernel, so a model without it runs the kernel it always ran.
    sinks: (num_heads,) per-head attention-sink logits (gpt-oss), as in `paged_attention_ref`; None (a
    constexpr of the kernel) runs the kernel every other model runs.
    """
    _check_inputs(query, kv_cache, query_start_loc, seq_lens, block_tables)
    num_tokens, num_heads = query.shape[:2]
    num_seqs, num_kv_heads = seq_lens.shape[0], kv_cache.shape[3]
    if out is None:
        out = torch.empty_like(query)
    elif out.shape != query.shape or out.stride(2) != 1:
        raise ValueError(f"out must be {tuple(query.shape)} and contiguous in head_dim, got {tuple(out.shape)}")
    if sliding_window is not None and sliding_window <= 0:
        raise ValueError(f"sliding_window must be a positive number of tokens, got {sliding_window}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be a positive number, got {softcap}")
    if sinks is not None and (sinks.shape != (num_heads,) or sinks.stride(0) != 1 or not sinks.is_floating_point()):
        raise ValueError(f"sinks must be a contiguous float tensor ({num_heads},), got {tuple(sinks.shape)}")
    is_fp8 = kv_cache.dtype == FP8_DTYPE
    if not is_fp8 and kv_cache.dtype != query.dtype:
        raise ValueError(f"kv_cache dtype {kv_cache.dtype} must match the query's {query.dtype} (or be fp8)")
    if num_tokens == 0 or num_seqs == 0:
        return out
    max_query_len = num_tokens if max_query_len is None else max(1, min(max_query_len, num_tokens))
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_query_len, max_seq_len, _num_sms(query.device.index))
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    scales = (k_scale, v_scale) if is_fp8 and k_scale is not None and v_scale is not None else None
    _launch(
        query,
        kv_cache,
        query_start_loc,
        seq_lens,
        block_tables,
        out,
        _Launch(
            scale,
            sliding_window,
            max_query_len,
            num_splits,
            scales,
            tiles or default_tiles(is_fp8, max_query_len),
            float(softcap or 0.0),
            sinks,
        ),
    )
    return out


FP8_DECODE_TILES = Tiles(tile_n=64, num_warps=2, num_stages=3)
"""Decode-only batches over an fp8 cache: what `attention_kernels.py --fp8-sweep` measured fastest on the
H200 (two warps: the e4m3 -> fp16 widening leaves the default four warps' loads too few in flight per
program; figures in the README, "fp8 KV cache")."""
FP8_TILES_ENV = "MOPT_ATTENTION_FP8_TILES"
""""TILE_N,NUM_WARPS,NUM_STAGES" in place of FP8_DECODE_TILES (for measuring a candidate end to end)."""


def default_tiles(fp8_cache: bool, max_query_len: int) -> Tiles:
    """The launch shape when the caller names none: `Tiles()`, or for decode over an fp8 cache
    FP8_DECODE_TILES ($MOPT_ATTENTION_FP8_TILES when set)."""
    return _fp8_decode_tiles(os.environ.get(FP8_TILES_ENV, "")) if fp8_cache and max_query_len == 1 else Tiles()


@functools.lru_cache(maxsize=4)
def _fp8_decode_tiles(override: str) -> Tiles:
    if not override.strip():
        return FP8_DECODE_TILES
    try:
        tile_n, num_warps, num_stages = (int(v) for v in override.split(","))
    except ValueError:
        raise ValueError(
            f"{FP8_TILES_ENV} must be TILE_N,NUM_WARPS,NUM_STAGES (three integers), got {override!r}"
        ) from None
    return Tiles(tile_n=tile_n, num_warps=num_warps, num_stages=num_stages)


@dataclass
class _Launch:
    """Per-call choices handed from `paged_attention` to `_launch`."""

    scale: float
    sliding_window: int | None
    max_query_len: int
    num_splits: int
    scales: tuple[torch.Tensor, torch.Tensor] | None  # (k_scale, v_scale) of an fp8 cache
    tiles: Tiles
    softcap: float  # 0.0: no capping
    sinks: torch.Tensor | None = None  # (num_heads,) sink logits; None: none (the kernel without them)


def _launch(query, kv_cache, query_start_loc, seq_lens, block_tables, out, cfg: _Launch) -> None:
    num_tokens, num_heads, head_dim = query.shape
    num_seqs, num_kv_heads = seq_lens.shape[0], kv_cache.shape[3]
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    block_q = min(triton.next_power_of_2(cfg.max_query_len), max(1, cfg.tiles.max_rows // group_pad))
    group_pad = max(group_pad, MIN_ROWS // block_q)  # decode: pad the head rows up to what tl.dot needs
    head_dim_pad = max(16, triton.next_power_of_2(head_dim))
    tile_n = cfg.tiles.tile_n or (32 if head_dim_pad > 128 else 64)
    decode_only = cfg.max_query_len == 1
    num_tiles = num_seqs if decode_only else num_tokens // block_q + (num_seqs if block_q > 1 else 0)
    dummy = seq_lens  # stands in for pointers a configuration does not read
    splits = cfg.num_splits
    if splits > 1:
        part_acc = torch.empty(num_tokens, num_heads, splits, head_dim_pad, dtype=torch.float32, device=query.device)
        part_max = torch.empty(num_tokens, num_heads, splits, dtype=torch.float32, device=query.device)
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = dummy
    k_scale, v_scale = cfg.scales or (dummy, dummy)
    is_fp8 = kv_cache.dtype == FP8_DTYPE
    _paged_attention_kernel[(num_tiles, num_kv_heads, splits)](
        out,
        part_acc,
        part_max,
        part_sum,
        query,
        kv_cache,
        query_start_loc,
        seq_lens,
        block_tables,
        k_scale,
        v_scale,
        1.0 if is_fp8 else cfg.scale,  # fp8: the softmax scale goes into q before its cast to fp16
        cfg.scale,
        cfg.sliding_window or 0,
        num_seqs,
        num_heads,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        kv_cache.stride(3),
        block_tables.stride(0),
        GROUP=group,
        GROUP_PAD=group_pad,
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=head_dim_pad,
        BLOCK_SIZE=kv_cache.shape[2],
        BLOCK_Q=block_q,
        TILE_N=tile_n,
        NUM_SPLITS=splits,
        USE_WINDOW=cfg.sliding_window is not None,
        HAS_SCALES=cfg.scales is not None,
        DOT_DTYPE=_dot_dtype(query.dtype, is_fp8),
        PRESCALE_Q=is_fp8,
        DECODE_ONLY=decode_only,
        SOFTCAP=cfg.softcap,
        sinks_ptr=cfg.sinks,  # None: a constexpr, no kernel parameter
        HAS_SINKS=cfg.sinks is not None,
        num_warps=cfg.tiles.num_warps,
        num_stages=cfg.tiles.num_stages,
        **pdl.options(out),
    )
    if splits > 1:
        _reduce_splits_kernel[(num_tokens, num_heads)](
            out,
            part_acc,
            part_max,
            part_sum,
            query_start_loc,
            num_seqs,
            num_heads,
            out.stride(0),
            out.stride(1),
            HEAD_DIM=head_dim,
            HEAD_DIM_PAD=head_dim_pad,
            NUM_SPLITS=splits,
            SPLITS_PAD=triton.next_power_of_2(splits),
            **pdl.options(out),
        )
