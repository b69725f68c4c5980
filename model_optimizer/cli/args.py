"""Turn config dataclasses into argparse flags, so flags and configs share one definition."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, TypeVar

from model_optimizer.config import field_choices, field_docs

T = TypeVar("T")


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add one `--flag-name` per field of `cls`, with the field's docstring as help."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    group = parser.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = None if f.default is dataclasses.MISSING else f.default
        help_text = f"{docs.get(f.name, '')} (default: {default})"
        hint = hints[f.name]
        if hint is bool:
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        choices = field_choices(cls, f.name) or None
        group.add_argument(flag, dest=f.name, type=_scalar_type(hint), choices=choices, default=None, help=help_text)


def dataclass_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build `cls` from parsed flags: only flags the user gave override the dataclass defaults."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None}
    values.update(overrides)
    return cls(**values)


def _scalar_type(hint: Any) -> type:
    for candidate in (bool, int, float):
        if hint is candidate or candidate in typing.get_args(hint):
            return candidate
    return str
