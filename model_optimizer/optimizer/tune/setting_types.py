"""What each tune setting is: its type, its allowed values and how a value given as YAML or as --set text
becomes one (the EngineConfig / ServerConfig fields by their type hints, and the two speculative knobs)."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal

from model_optimizer.runtime.config import VLLM_SPELLINGS, EngineConfig, field_choices
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.units import TOKEN_COUNTS, parse_size, parse_token_count, size_fields

Value = bool | int | float | str | None


SPECULATIVE_KNOBS: dict[str, type] = {"speculative_method": str, "num_speculative_tokens": int}
"""Knobs that are no EngineConfig field: each trial's `speculative_config` is made of them (`with_speculation`)."""


def coerce(name: str, value: Any) -> Value:
    """`value` as the type of setting `name`; an unknown name or a wrong type is a ValueError."""
    kind = setting_type(name)
    allowed = setting_choices(name)
    if value is None and is_optional(name):
        return None  # the field's "empty" (e.g. quantization: as config.json says)
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, got {value!r}")
        value = float(value)
    if kind is str and isinstance(value, bool):
        value = _yaml_word(name, value, allowed)
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    value = VLLM_SPELLINGS.get(name, {}).get(value, value) if isinstance(value, str) else value  # half: float16
    if allowed and value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return value


YAML_BOOLEANS = {True: ("true", "yes", "on"), False: ("false", "no", "off")}
"""The words YAML 1.1 (PyYAML) reads as true and false when unquoted: `speculative_method: [off, ngram]` gave False."""


def _yaml_word(name: str, value: bool, allowed: tuple) -> Value:
    """The string a YAML boolean stood for in a string setting: the one value the setting takes that YAML reads
    as `value` (`off` for speculative_method); otherwise a ValueError that says to quote it."""
    words = [*allowed, *(["off"] if name == "speculative_method" else [])]
    matches = [w for w in words if isinstance(w, str) and w.lower() in YAML_BOOLEANS[value]]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(
        f"{name} must be a string, got {value!r} (YAML reads an unquoted on/off/yes/no/true/false as a "
        "boolean: quote the value)"
    )


def _hints() -> dict[str, Any]:
    hints: dict[str, Any] = dict(SPECULATIVE_KNOBS)
    for cls in (EngineConfig, ServerConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        hints.update({k: v for k, v in typing.get_type_hints(cls).items() if k in names})
    return hints


def setting_type(name: str) -> type:
    hints = _hints()
    if name not in hints:
        raise ValueError(
            f"unknown setting {name!r}; settings are `mopt serve` flag names "
            f"(EngineConfig / ServerConfig fields): {', '.join(sorted(hints))}"
        )
    hint = hints[name]
    if typing.get_origin(hint) is Literal:
        return str
    args = typing.get_args(hint) or (hint,)
    for kind in (bool, int, float, str):
        if kind in args:
            return kind
    return str


def setting_choices(name: str) -> tuple:
    """The allowed values of a Literal field, optional ones (`Literal[...] | None`) included."""
    for cls in (EngineConfig, ServerConfig):
        if name in {f.name for f in dataclasses.fields(cls)}:
            return field_choices(cls, name)
    hint = _hints()[name]  # a speculative knob
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()


def is_optional(name: str) -> bool:
    return type(None) in typing.get_args(_hints()[name])


def from_text(name: str, raw: str) -> Value:
    """A --set value typed by its field: true/false, integers, numbers, or the text."""
    kind = setting_type(name)
    try:
        if kind is bool:
            lowered = raw.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if name in TOKEN_COUNTS:
                return parse_token_count(raw)
            return parse_size(raw) if name in size_fields(EngineConfig) else int(raw)
        if kind is float:
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError
            return number
    except ValueError:
        raise ValueError(f"--set {name}={raw}: {name} must be a {kind.__name__}") from None
    return raw
