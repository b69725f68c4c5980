"""Triton kernel that draws the next token of each row in one pass over the logits (Gumbel-max).

argmax(logits / T + G) with G ~ Gumbel(0, 1) drawn independently per vocabulary entry is a draw
from softmax(logits / T). The kernel reads the logits once in their own dtype (bf16 on the GPU),
makes the noise on the fly with Philox keyed by a per-row seed and the vocabulary index, and
leaves one (best score, index) per chunk of the row; the row's last program to finish (an atomic
count, reset after) takes the argmax over the chunks and writes the token and its finite flag. That
last step was four torch ops after the kernel (max, gather, two views, isfinite): a few GPU us, but
~12% of the host's time per decode step of a small model at batch 1 (py-spy on the H200's host),
each op a launch through torch's dispatcher.
The unfused path (float copy, temperature, softmax, exponential noise, divide, argmax) reads and
writes the float32 logits about eight times over: at 256 rows of a 151,936-token vocabulary that
is about 1.9 GB per step. Greedy rows (inverse temperature 0) take the plain argmax, ties to the
lowest index like torch.argmax. Each program also checks its chunk for NaN/inf (a NaN best score
marks the chunk), so the sampler learns which rows' logits were not finite without another pass.

A row may also be constrained by a grammar's token bitmask (runtime/structured): tokens whose bit is
clear score -inf, read from the packed mask beside the logits, so a constrained row costs no extra pass
over its logits; the finite check still looks at the model's own logits only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels.counters import Counters
from model_optimizer.runtime.sampler_output import NONFINITE_TOKEN

CHUNK = 4096
"""Vocabulary entries per program."""

_counters = Counters(1024)
"""Per-row counters of the rows' last chunk programs (kernels/counters.py)."""


@triton.jit
def _gumbel_argmax_kernel(
    logits_ptr,
    inv_temp_ptr,
    seed_ptr,
    best_ptr,
    index_ptr,
    mask_ptr,
    mask_index_ptr,
    mask_words,
    vocab_size,
    stride_row,
    num_chunks,
    token_ptr,
    ok_ptr,
    checked_ptr,
    count_ptr,
    CHUNK: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CHUNKS_PAD: tl.constexpr,
    FINISH: tl.constexpr,
    HAS_CHECKED: tl.constexpr,
    NONFINITE: tl.constexpr,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    valid = cols < vocab_size
    x = tl.load(logits_ptr + row.to(tl.int64) * stride_row + cols, mask=valid, other=0.0).to(tl.float32)
    inv_temp = tl.load(inv_temp_ptr + row)
    seed = tl.load(seed_ptr + row)
    u = tl.rand(seed, cols)  # uniform in [0, 1)
    gumbel = -tl.log(-tl.log(tl.maximum(u, 1e-20)))  # u -> 0 gives -inf noise: never picked
    noisy = tl.where(inv_temp > 0, x * inv_temp + gumbel, x)
    allowed = valid
    if HAS_MASK:
        mask_row = tl.load(mask_index_ptr + row)  # -1: this row is not constrained (all bits read as set)
        constrained = (cols * 0 + mask_row) >= 0  # a block of flags: a load mask must be one
        words = tl.load(mask_ptr + mask_row.to(tl.int64) * mask_words + cols // 32, mask=valid & constrained, other=-1)
        allowed = allowed & (((words >> (cols % 32)) & 1) != 0)
    score = tl.where(allowed, noisy, float("-inf"))
    best = tl.max(score, axis=0)
    # lowest index among ties; a NaN best matches nothing and leaves a valid id all the same
    index = tl.min(tl.where(score == best, cols, vocab_size - 1), axis=0)
    num_bad = tl.sum(tl.where(tl.abs(x) < float("inf"), 0, 1), axis=0)  # NaN and inf logits
    tl.store(best_ptr + row * num_chunks + chunk, tl.where(num_bad > 0, float("nan"), best))
    tl.store(index_ptr + row * num_chunks + chunk, index)
    if FINISH:
        tl.debug_barrier()  # the stores above are done before this program reports in
        if tl.atomic_add(count_ptr + row, 1, sem="acq_rel") == num_chunks - 1:  # the row's last chunk
            chunks = tl.arange(0, CHUNKS_PAD)
            real = chunks < num_chunks
            bests = tl.load(best_ptr + row * num_chunks + chunks, mask=real, other=float("-inf"), cache_modifier=".cg")
            nan = bests != bests
            top = tl.max(tl.where(nan, float("-inf"), bests), axis=0)
            # as torch.max over the chunks: a NaN chunk wins (the first one), else the first best chunk
            first_nan = tl.min(tl.where(nan, chunks, CHUNKS_PAD), axis=0)
            first_top = tl.min(tl.where(real & (bests == top), chunks, CHUNKS_PAD), axis=0)
            chosen = tl.where(first_nan < CHUNKS_PAD, first_nan, first_top)
            value = tl.sum(tl.where(chunks == chosen, bests, 0.0), axis=0)
            ids = tl.load(index_ptr + row * num_chunks + chunks, mask=real, other=0, cache_modifier=".cg")
            token = tl.sum(tl.where(chunks == chosen, ids, 0), axis=0)
            finite = tl.abs(value) < float("inf")  # as isfinite of that best
            tl.store(token_ptr + row, token)
            tl.store(ok_ptr + row, finite.to(tl.int8))
            if HAS_CHECKED:
                tl.store(checked_ptr + row, tl.where(finite, token, NONFINITE))
            tl.atomic_xchg(count_ptr + row, 0)  # ready for the next launch


def gumbel_sample(
    logits: torch.Tensor,
    inv_temperatures: torch.Tensor,
    seeds: torch.Tensor,
    token_mask: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Sampled token ids (rows,) int64: row i from softmax(logits[i] * inv_temperatures[i]), with Philox
    noise keyed by seeds[i]; rows with inverse temperature 0 take argmax(logits[i]).

    logits (rows, vocab) float32, bfloat16 or float16, contiguous rows; inv_temperatures (rows,)
    float32 and seeds (rows,) int64 on the same device. No host synchronisation.

    `token_mask` is (bitmask (num_masked, words) int32, mask_index (rows,) int32): row i may only take
    tokens whose bit is set in bitmask[mask_index[i]] (no constraint where mask_index[i] is -1), as if the
    others' logits were -inf (kernels/reference.apply_token_mask).
    """
    return gumbel_sample_checked(logits, inv_temperatures, seeds, token_mask)[0]


def gumbel_sample_checked(
    logits: torch.Tensor,
    inv_temperatures: torch.Tensor,
    seeds: torch.Tensor,
    token_mask: tuple[torch.Tensor, torch.Tensor] | None = None,
    checked_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`gumbel_sample`, plus (rows,) bool: False where the row's logits hold a NaN or an inf (the model's
    logits: tokens a mask forbids are no fault).

    Such a row still gets a valid vocabulary id (meaningless), so a next step may read it safely.
    `checked_out`, a (rows,) int64 tensor, receives the ids with NONFINITE_TOKEN in such rows (what the
    host reads: sampler.SampledTokens.checked_ids), written by the same launch.
    """
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be (rows, vocab) and contiguous along vocab, got {tuple(logits.shape)}")
    rows, vocab = logits.shape
    if inv_temperatures.shape != (rows,) or seeds.shape != (rows,):
        raise ValueError(
            f"need one inverse temperature and one seed per row ({rows}), "
            f"got {tuple(inv_temperatures.shape)} and {tuple(seeds.shape)}"
        )
    num_chunks = triton.cdiv(vocab, CHUNK)
    best = torch.empty(rows, num_chunks, dtype=torch.float32, device=logits.device)
    index = torch.empty(rows, num_chunks, dtype=torch.int64, device=logits.device)
    bitmask, mask_index = token_mask if token_mask is not None else (seeds, seeds)  # unread without a mask
    if token_mask is not None and (mask_index.shape != (rows,) or bitmask.dim() != 2 or bitmask.stride(1) != 1):
        raise ValueError(f"token_mask needs a (masked, words) bitmask and one mask index per row ({rows})")
    counters = _counters.get(logits.device, rows)
    tokens = torch.empty(rows, dtype=torch.int64, device=logits.device)
    ok = torch.empty(rows, dtype=torch.int8, device=logits.device)
    if rows:
        _gumbel_argmax_kernel[(rows, num_chunks)](
            logits,
            inv_temperatures,
            seeds,
            best,
            index,
            bitmask,
            mask_index,
            bitmask.stride(0) if token_mask is not None else 0,
            vocab,
            logits.stride(0),
            num_chunks,
            tokens,
            ok,
            checked_out if checked_out is not None else tokens,  # unwritten without HAS_CHECKED
            counters if counters is not None else ok,
            CHUNK=CHUNK,
            HAS_MASK=token_mask is not None,
            CHUNKS_PAD=triton.next_power_of_2(num_chunks),
            FINISH=counters is not None,
            HAS_CHECKED=checked_out is not None,
            NONFINITE=NONFINITE_TOKEN,
        )
    if counters is None:  # no counters can be made inside a CUDA-graph capture: the argmax over chunks in torch
        values, chunk = best.max(dim=1, keepdim=True)  # a NaN chunk wins and stays NaN
        tokens, finite = index.gather(1, chunk).squeeze(1), values.squeeze(1).isfinite()
        if checked_out is not None:
            torch.where(finite, tokens, NONFINITE_TOKEN, out=checked_out)
        return tokens, finite
    return tokens, ok.view(torch.bool)
