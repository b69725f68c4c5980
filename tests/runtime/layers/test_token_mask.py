"""The torch form of grammar masks, against numpy's own bit unpacking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_optimizer.runtime.layers.token_mask import TokenMask, allowed_tokens, apply_token_mask, forbidden_tokens


@pytest.mark.parametrize(("vocab", "num_masked", "rows"), [(37, 2, 5), (64, 1, 3), (1000, 3, 4)])
def test_allowed_tokens_are_the_masks_bits_and_unconstrained_rows_allow_all(vocab, num_masked, rows):
    rng = np.random.default_rng(vocab)
    words = (vocab + 31) // 32
    bitmask = rng.integers(-(2**31), 2**31, size=(num_masked, words), dtype=np.int64).astype(np.int32)
    index = np.array([-1] + [k % num_masked for k in range(rows - 1)], dtype=np.int32)  # row 0 unconstrained
    mask = TokenMask(torch.from_numpy(bitmask), torch.from_numpy(index))
    bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, :vocab].astype(bool)
    expected = torch.from_numpy(np.where(index[:, None] >= 0, bits[np.maximum(index, 0)], True))
    assert torch.equal(allowed_tokens(mask, vocab), expected)
    assert torch.equal(forbidden_tokens(mask, vocab), ~expected)
    logits = torch.randn(rows, vocab)
    masked = apply_token_mask(logits, mask)
    assert torch.equal(masked, torch.where(expected, logits, float("-inf")))
    assert torch.equal(apply_token_mask(logits, forbidden_tokens(mask, vocab)), masked)  # unpacked once, same
