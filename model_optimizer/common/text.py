"""Text for messages."""

from __future__ import annotations


def not_utf8_at(text: str) -> int | None:
    """Where `text` stops being encodable as UTF-8 (a lone surrogate: a JSON \\ud800 escape, or a command-line
    byte that was not UTF-8, which Python keeps as U+DC80..U+DCFF), or None for valid text. Tokenizers
    raise on such strings, so every input is checked with this first."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def clip(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with "..." at the end when it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
