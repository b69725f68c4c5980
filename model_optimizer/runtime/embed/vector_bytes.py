"""Embedding vectors as base64 text in an element type and byte order, as vLLM's `embed_dtype` and
`endianness` ask for them: float32 little-endian is OpenAI's format (what the openai package decodes);
float16, bfloat16 and the two fp8 types send a half or a quarter of the bytes. A client decodes the bytes
with the dtype it asked for (bfloat16 and fp8: torch's, numpy has none)."""

from __future__ import annotations

import base64
import sys

import torch

EMBED_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
"""vLLM's embed_dtype names -> torch dtypes (the fp8 ones are storage only: each value rounded to the nearest)."""


def base64_vectors(vectors: torch.Tensor, embed_dtype: str = "float32", endianness: str = "native") -> list[str]:
    """Each row of `vectors` (num, dims) as base64 of its values in `embed_dtype`, bytes in `endianness` order
    ("native": this machine's)."""
    if embed_dtype not in EMBED_DTYPES:
        raise ValueError(f"embed_dtype must be one of {', '.join(EMBED_DTYPES)}, got {embed_dtype!r}")
    if endianness not in ("native", "big", "little"):
        raise ValueError(f"endianness must be native, big or little, got {endianness!r}")
    cast = vectors.detach().cpu().to(EMBED_DTYPES[embed_dtype]).contiguous()
    width = cast.element_size()
    raw = cast.view(torch.uint8).reshape(len(cast), -1, width)  # (num, dims, bytes of one value), host order
    if endianness not in ("native", sys.byteorder) and width > 1:
        raw = raw.flip(-1)
    data = raw.reshape(len(cast), -1).numpy()
    return [base64.b64encode(row.tobytes()).decode() for row in data]
