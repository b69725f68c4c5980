"""TokenMask: which tokens each sampling row may take (a grammar's bitmask), on the device, and its torch form.

The engine core fills the bitmask on the host for the constrained rows only (runtime/structured); the
runner copies it over with the step's sampling and the sampler applies it: inside the fused sampling
kernel (kernels/sampling.py reads the packed bits beside the logits), or with `apply_token_mask` on
the torch path, which is also the reference the kernel is tested against.
"""

from __future__ import annotations

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


def allowed_tokens(mask: TokenMask, vocab_size: int) -> torch.Tensor:
    """(rows, vocab_size) bool: True where a row may take the token (every token of an unconstrained row).

    Decided on the device: no host sync. Unpacks the bits into a (rows, words * 32) temporary."""
    rows = mask.mask_index.long()
    words = mask.bitmask[rows.clamp(min=0)]  # (rows, words); an unconstrained row reads row 0, overridden below
    shifts = torch.arange(32, dtype=torch.int32, device=words.device)
    bits = ((words.unsqueeze(-1) >> shifts) & 1).view(words.shape[0], -1)[:, :vocab_size]  # (rows, vocab)
    return (bits != 0) | (rows < 0)[:, None]


def apply_token_mask(logits: torch.Tensor, mask: TokenMask) -> torch.Tensor:
    """The logits with every token a row may not take set to -inf (a new tensor)."""
    return logits.masked_fill(~allowed_tokens(mask, logits.shape[-1]), float("-inf"))
