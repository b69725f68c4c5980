"""Settings written with a unit: sizes in bytes (8GiB, 512MB) and token counts (32k, 32K), as flags,
config files and keyword arguments give them. A config dataclass marks a byte-size field `ByteSize`, and
`parse_size_fields` turns the text of each such field into bytes.
"""

from __future__ import annotations

import re
import typing
from fractions import Fraction
from typing import Annotated

BYTES = "bytes"
ByteSize = Annotated[int, BYTES]
"""A size in bytes that flags, config files and keyword arguments may also give as text: 8GiB, 512MB."""

SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SIZE_UNITS |= {f"{u}ib": v for u, v in SIZE_UNITS.items() if u not in ("", "b")}
SIZE_UNITS |= {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(value: int | str) -> int:
    """Bytes from an integer or text: 1073741824, 8GiB, 512MiB, 1.5G (K/M/G/T and KiB... are powers of
    1024, KB/MB/GB/TB powers of 1000, case-insensitive). ValueError says what is allowed."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in SIZE_UNITS:
        raise ValueError(
            f"{value!r} is not a size: give bytes or a number with a unit, e.g. 8GiB, 512MiB, 2GB "
            "(KiB/MiB/GiB/TiB and K/M/G/T are powers of 1024, KB/MB/GB/TB powers of 1000)"
        )
    return int(float(match.group(1)) * SIZE_UNITS[unit])


def format_size(n: int) -> str:
    """8589934592 -> '8GiB' (exact binary units where they fit, else bytes)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = SIZE_UNITS[unit.lower()]
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def size_fields(cls: type) -> tuple[str, ...]:
    """The fields of a config dataclass typed ByteSize."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(name for name, hint in hints.items() if BYTES in getattr(hint, "__metadata__", ()))


def parse_size_fields(obj: object) -> None:
    """Turn sizes given as text (8GiB) into bytes, naming the field when one is not a size."""
    for name in size_fields(type(obj)):
        value = getattr(obj, name)
        if isinstance(value, str):
            try:
                setattr(obj, name, parse_size(value))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None


TOKEN_COUNTS = ("max_model_len", "max_num_batched_tokens")
"""Settings that take a token count with vLLM's suffixes as well, as text: 32k = 32,000, 32K = 32,768."""
TOKEN_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
TOKEN_COUNT = re.compile(r"(\d+)(?:\.(\d+))?([kmgtKMGT])?")


def parse_token_count(text: str) -> int:
    """4096, 32k (32,000), 32K (32,768), 1.5k (1,500): digits only, a fraction only before a decimal suffix
    (k, m, g, t), and a whole number of tokens; ValueError otherwise. Whitespace around it is ignored."""
    text = text.strip()
    match = TOKEN_COUNT.fullmatch(text)
    whole, fraction, suffix = match.groups() if match else (None, None, None)
    if whole is None or (fraction is not None and (suffix is None or suffix.isupper())):
        raise ValueError(f"{text!r} is not a token count (4096, 32k = 32,000, 32K = 32,768)")
    value = Fraction(f"{whole}.{fraction or 0}") * TOKEN_SUFFIXES.get(suffix or "", 1)
    if value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of tokens")
    return int(value)


def parse_max_model_len(value: str | int | None) -> int | None:
    """max_model_len as vLLM's flag takes it: a token count (32k), or auto / -1, which vLLM reads as the
    longest that fits in memory and this engine as the model's own max_position_embeddings (None)."""
    if value is None or value == -1:
        return None
    if isinstance(value, str):
        if value.strip().lower() in ("auto", "-1"):
            return None
        return parse_token_count(value)
    return value
