"""Turn config dataclasses into argparse flags, so flags and configs share one definition."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

from model_optimizer.runtime.config import VLLM_SPELLINGS, field_choices, field_docs
from model_optimizer.runtime.server.config import SPACE_SEPARATED
from model_optimizer.runtime.units import (
    TOKEN_COUNTS,
    format_size,
    parse_max_model_len,
    parse_size,
    parse_token_count,
    size_fields,
)

T = TypeVar("T")
SHORT_FLAGS = {
    "tensor_parallel_size": "-tp",
    "quantization": "-q",
    "enable_expert_parallel": "-ep",
    "api_server_count": "-asc",
}
"""vLLM's short spellings of some flags."""


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add one `--flag-name` per field of `cls`, with the field's docstring as help."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    sizes = size_fields(cls)
    group = parser.add_argument_group(cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = None if f.default is dataclasses.MISSING else f.default
        help_text = f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%")  # argparse %-formats help
        hint = hints[f.name]
        flags = (flag, SHORT_FLAGS[f.name]) if f.name in SHORT_FLAGS else (flag,)
        if hint is bool:  # BooleanOptionalAction adds --no-X for the long flag alone, as in vLLM
            group.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        if f.name in sizes:
            help_text = f"{docs.get(f.name, '')} (default: {format_size(default)})".replace("%", "%%")
            group.add_argument(flag, dest=f.name, type=_size, metavar="SIZE", default=None, help=help_text)
            continue
        if f.name in SPACE_SEPARATED and _takes_list(hint):  # the server's; a client's api_key is one key
            group.add_argument(flag, dest=f.name, nargs="+", metavar="NAME", default=None, help=help_text)
            continue
        if f.name in TOKEN_COUNTS:
            kind = _max_model_len if f.name == "max_model_len" else token_count
            group.add_argument(flag, dest=f.name, type=kind, metavar="TOKENS", default=None, help=help_text)
            continue
        choices = field_choices(cls, f.name) + tuple(VLLM_SPELLINGS.get(f.name, ())) or None
        group.add_argument(*flags, dest=f.name, type=_scalar_type(hint), choices=choices, default=None, help=help_text)


def add_config_file_arg(parser: argparse.ArgumentParser, *classes: type, extra: tuple[str, ...] = ()) -> None:
    """Add `--config FILE`: a YAML or JSON mapping of `classes`' field names (the flags' names with
    underscores) to values. Flags given on the command line override the file. `extra`: other names the
    file may hold (read with read_config_file's `extra`, by the command that knows them)."""
    names = ", ".join(c.__name__ for c in classes)
    parser.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        default=None,
        help=f"YAML or JSON file of settings ({names} fields, e.g. max_num_seqs: 128); "
        "flags on the command line override it",
    )
    parser.set_defaults(config_classes=classes, config_extra=extra)


def read_config_file(path: str | Path, classes: tuple[type, ...], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings in a YAML or JSON file, each checked against the field of `classes` it names:
    an unknown key or a value of the wrong type is a ValueError naming it. Names in `extra` are taken as
    they are, for the caller to check."""
    import yaml

    file = Path(path).expanduser()
    if file.is_dir():
        raise ValueError(f"config file {file} is a folder; give a YAML or JSON file")
    if not file.is_file():
        raise FileNotFoundError(f"config file {file} does not exist")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ValueError(f"config file {file} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:  # permission denied, an I/O error: the file's fault, named
        raise ValueError(f"config file {file} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"config file {file} is not valid YAML or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {file} must hold a mapping of setting names to values, got {type(data).__name__}"
        )
    hints = {
        name: hint
        for cls in classes
        for name, hint in typing.get_type_hints(cls).items()
        if name in {f.name for f in dataclasses.fields(cls)}
    }
    sizes = {name for cls in classes for name in size_fields(cls)}
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in extra:
            values[name] = value
            continue
        if name not in hints:
            raise ValueError(f"config file {file}: unknown setting {key!r}; allowed: {', '.join(sorted(hints))}")
        if name == "max_model_len" and (value == -1 or isinstance(value, str)):
            try:
                value = parse_max_model_len(value)
            except ValueError as exc:
                raise ValueError(f"config file {file}: {name}: {exc}") from None
        elif name in TOKEN_COUNTS and isinstance(value, str):
            try:
                value = parse_token_count(value)
            except ValueError as exc:
                raise ValueError(f"config file {file}: {name}: {exc}") from None
        if name in sizes and isinstance(value, str):
            try:
                value = parse_size(value)
            except ValueError as exc:
                raise ValueError(f"config file {file}: {name}: {exc}") from None
        values[name] = _checked(file, name, hints[name], value)
    return values


def dataclass_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build `cls` from parsed flags: the --config file's settings (when the parser has one), then the
    flags the user gave, then `overrides`, each over the dataclass defaults."""
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if getattr(args, "config_file", None):
        file_values = read_config_file(
            args.config_file, getattr(args, "config_classes", (cls,)), getattr(args, "config_extra", ())
        )
        values.update({k: v for k, v in file_values.items() if k in names})
    values.update({name: getattr(args, name) for name in names if getattr(args, name, None) is not None})
    values.update(overrides)
    return cls(**values)


def _checked(file: Path, name: str, hint: Any, value: Any) -> Any:
    """`value` if it fits the field's type (an int where a float is expected becomes a float)."""
    allowed = typing.get_args(hint) if typing.get_args(hint) else (hint,)
    if value is None:
        if type(None) in allowed:
            return None
        raise ValueError(f"config file {file}: {name} may not be empty")
    if dict in allowed and isinstance(value, dict):
        return value  # a nested setting (speculative_config); its own parser checks it
    if any(typing.get_origin(a) is list for a in allowed):
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return value
        raise ValueError(f"config file {file}: {name} must be a list of strings, got {value!r}")
    kind = _scalar_type(hint)
    if typing.get_origin(hint) is Literal or str in allowed:
        kind = str
    if kind in (int, float) and isinstance(value, str):  # `port: "8001"`: vLLM passes it through the flag's type
        try:
            value = kind(value.strip())
        except ValueError:
            pass  # refused below, naming the type
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ValueError(f"config file {file}: {name} must be a {kind.__name__}, got {value!r}")
    return value


def token_count(text: str) -> int:
    """argparse type of TOKEN_COUNTS flags (units.parse_token_count; argparse names the flag in its error)."""
    try:
        return parse_token_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_model_len(text: str) -> int | str:
    """argparse type of --max-model-len: a token count, or auto / -1 (the model's own length), kept as "auto"
    so that it overrides a --config file's value (EngineConfig reads it as None)."""
    try:
        return "auto" if parse_max_model_len(text) is None else parse_token_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    """argparse type of ByteSize flags: bytes or 8GiB, 512MB (argparse names the flag in its error)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _takes_list(hint: Any) -> bool:
    """Whether a field's type admits a list of values (`str | list[str] | None`)."""
    return any(typing.get_origin(arg) is list for arg in (hint, *typing.get_args(hint)))


def _scalar_type(hint: Any) -> type:
    for candidate in (bool, int, float):
        if hint is candidate or candidate in typing.get_args(hint):
            return candidate
    return str
