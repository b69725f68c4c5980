"""Text for messages."""

from __future__ import annotations


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with "..." at the end when it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
