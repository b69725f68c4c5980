"""TokenMask: which tokens each sampling row may take (a grammar's bitmask), on the device, and its torch form.

The engine core fills the bitmask on the host for the constrained rows only (runtime/structured); the
runner copies it over with the step's sampling and the sampler applies it: inside the fused sampling
kernel (kernels/sampling.py reads the packed bits beside the logits), or with `apply_token_mask` on
the torch path, which is also the reference the kernel is tested against.

The torch form unpacks a byte at a time, through a (256, 8) table of each byte's bits: one
index_select that writes the (rows, vocab) booleans, where shifting each word by 0..31 wrote four
int32 temporaries of that size (on the CPU, where the torch path is the only one, most of a masked
step's sampling). The sampler unpacks a step's mask once (`forbidden_tokens`) for its logprobs and its
sampling both.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch


@dataclass
class TokenMask:
    """A step's grammar masks on the device."""

    bitmask: torch.Tensor
    """(num_masked, words) int32: bit t of word t // 32 set when token t is allowed."""
    mask_index: torch.Tensor
    """(rows,) int32: the bitmask row of each sampling row, -1 where the row is not constrained."""

    def as_tuple(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bitmask, self.mask_index


_BYTE_BITS: dict[tuple[torch.device, bool], torch.Tensor] = {}
"""Per (device, inverted), (256, 8) bool: row b holds byte b's bits (or their complement), lowest first;
made once, not each step."""


def _byte_bits(device: torch.device, inverted: bool) -> torch.Tensor:
    table = _BYTE_BITS.get((device, inverted))
    if table is None:
        # made where it is read: no copy from pageable host memory (a synchronizing one)
        table = ((torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1).bool()
        table = ~table if inverted else table
        _BYTE_BITS[(device, inverted)] = table
    return table


def _unpack(mask: TokenMask, vocab_size: int, inverted: bool) -> torch.Tensor:
    """(rows, vocab_size) bool: each row's mask bits (complemented when `inverted`); all set for an
    unconstrained row. Word t // 32's bit t % 32 is bit t % 8 of its byte (t % 32) // 8 in little-endian
    memory (every host and GPU this runs on: checked). Decided on the device: no host sync."""
    if sys.byteorder != "little":
        raise RuntimeError("grammar masks are unpacked as little-endian words; this host is big-endian")
    rows = mask.mask_index.long()
    words = mask.bitmask[rows.clamp(min=0)]  # (rows, words); an unconstrained row reads row 0...
    words = words.masked_fill((rows < 0)[:, None], -1)  # ...and gets every bit set: any token
    flat = words.view(torch.uint8).flatten().int()  # (rows * words * 4,): the bytes, in memory order
    bits = _byte_bits(words.device, inverted).index_select(0, flat)  # (rows * words * 4, 8)
    return bits.view(words.shape[0], -1)[:, :vocab_size]


def allowed_tokens(mask: TokenMask, vocab_size: int) -> torch.Tensor:
    """(rows, vocab_size) bool: True where a row may take the token (every token of an unconstrained row)."""
    return _unpack(mask, vocab_size, inverted=False)


def forbidden_tokens(mask: TokenMask, vocab_size: int) -> torch.Tensor:
    """(rows, vocab_size) bool: True where a row may not take the token (`allowed_tokens`' complement)."""
    return _unpack(mask, vocab_size, inverted=True)


def apply_token_mask(logits: torch.Tensor, mask: TokenMask | torch.Tensor) -> torch.Tensor:
    """The logits with every token a row may not take set to -inf (a new tensor). `mask`: the TokenMask,
    or its `forbidden_tokens` (when a step applies it twice: unpacked once)."""
    forbidden = forbidden_tokens(mask, logits.shape[-1]) if isinstance(mask, TokenMask) else mask
    return logits.masked_fill(forbidden, float("-inf"))
