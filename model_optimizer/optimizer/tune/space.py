"""The search space: which serve settings a study varies, over which values, and which it holds fixed.

Every knob is an EngineConfig field under its vLLM name, so a trial's settings are exactly the flags
of `mopt serve` (and, where vLLM has the same flag, of `vllm serve`). The user narrows the space with
`--space space.yaml` (knob -> list of choices, or {low, high, log}) and holds settings with
`--set name=value`; fixed settings may be any EngineConfig or ServerConfig field. Everything is
checked up front: an unknown name, a value of the wrong type or one EngineConfig refuses is a
ValueError naming it, before any server starts.

tensor_parallel_size is not searched by default (every trial runs on one GPU, as `mopt serve` does):
hold it (`--set tensor_parallel_size=2`) or list it in the space file (`tensor_parallel_size: [1, 2]`).
The predictor skips a size that needs more GPUs than are visible, or that the model's heads do not
divide by, saying why (tune/collectives.py).

Speculative decoding has two knobs of its own, which a trial turns into its `speculative_config`:
`speculative_method` (off, ngram, or a draft model's folder) and `num_speculative_tokens`
(`speculative_method: [off, ngram, /models/llama-3.2-1b]`, `num_speculative_tokens: [2, 4, 6]`). They are not
searched by default: speculation pays at low load only, which the default workloads rarely are.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from model_optimizer.runtime.config import VLLM_SPELLINGS, EngineConfig, field_choices
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.units import TOKEN_COUNTS, parse_size, parse_token_count, size_fields

Value = bool | int | float | str | None


@dataclass
class Knob:
    """One searched setting: a list of choices, or a numeric range."""

    name: str
    choices: list[Value] | None = None
    """Values to pick from (categorical); None: a range."""
    low: float | None = None
    high: float | None = None
    log: bool = False
    """Sample the range on a log scale (sizes and counts)."""
    step: float | None = None
    """Grid of the range (None: continuous for floats, 1 for integers)."""

    @property
    def is_int(self) -> bool:
        return _scalar(self.name) is int

    def describe(self) -> str:
        if self.choices is not None:
            return "{" + ", ".join(map(str, self.choices)) + "}"
        return f"[{self.low:g}, {self.high:g}]" + (" log" if self.log else "")


DEFAULT_KNOBS: tuple[Knob, ...] = (
    Knob("max_num_seqs", choices=[16, 32, 64, 128, 256, 512]),
    Knob("max_num_batched_tokens", choices=[2048, 4096, 8192, 16384]),
    Knob("block_size", choices=[16, 32]),
    Knob("gpu_memory_utilization", choices=[0.8, 0.9, 0.95]),
    Knob("kv_cache_dtype", choices=["auto", "fp8"]),
    Knob("enable_prefix_caching", choices=[True, False]),
    Knob("enable_chunked_prefill", choices=[True, False]),
    Knob("enforce_eager", choices=[False, True]),
    Knob("async_scheduling", choices=[True, False]),
    Knob("scheduling_policy", choices=["fcfs"]),
)
"""The space searched when the user gives none: every engine knob that changes speed or memory. No budget
under 2048: a step that carries a prefill chunk runs eagerly (CUDA graphs replay decode-only steps), so a
small budget spreads each prompt over more slow steps and the start-up burst over many (the H200
trial that showed it: README "Tune: mopt tune"). max_num_seqs above the clients in flight is moot;
the guided search (guide.py) measures such a value last among equals."""

NOT_KNOBS = {"model", "tokenizer", "device", "load_format", "seed"}

TUNER_OWNED = {
    "model": "give the model with --model",
    "host": "each trial's server listens on 127.0.0.1, where the tuner loads it",
    "port": "the tuner gives each trial's server a free port",
    "ssl_keyfile": "the tuner loads each trial's server over plain HTTP",
    "ssl_certfile": "the tuner loads each trial's server over plain HTTP",
}
"""Settings the trial command sets itself: held with --set, a template's {flags} passed --port twice and
a held model named in best.yaml was not the one the trials served."""

SPECULATIVE_KNOBS: dict[str, type] = {"speculative_method": str, "num_speculative_tokens": int}
"""Knobs that are no EngineConfig field: each trial's `speculative_config` is made of them (`with_speculation`)."""
"""Settings that pick what runs, not how fast: they may be fixed but never searched."""


@dataclass
class SearchSpace:
    """The knobs a study searches and the settings it holds fixed (field name -> value)."""

    knobs: list[Knob] = field(default_factory=lambda: [dataclasses.replace(k) for k in DEFAULT_KNOBS])
    fixed: dict[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for knob in self.knobs:
            _check_knob(knob)
        for name, value in self.fixed.items():
            self.fixed[name] = coerce(name, value)
        self.knobs = [k for k in self.knobs if k.name not in self.fixed]
        self.settings({k.name: k.choices[0] if k.choices else k.low for k in self.knobs})  # fixed values together

    def settings(self, sampled: dict[str, Value]) -> dict[str, Value]:
        """The full settings of one candidate (sampled knobs over fixed values), checked by the configs."""
        values = with_speculation({**self.fixed, **sampled})
        engine_names = {f.name for f in dataclasses.fields(EngineConfig)}
        EngineConfig(**{k: v for k, v in values.items() if k in engine_names})
        ServerConfig(**{k: v for k, v in values.items() if k not in engine_names and k != "port"})
        return values

    def to_dict(self) -> dict:
        return {"knobs": [dataclasses.asdict(k) for k in self.knobs], "fixed": dict(self.fixed)}

    @classmethod
    def from_dict(cls, data: dict) -> SearchSpace:
        return cls([Knob(**k) for k in data["knobs"]], dict(data["fixed"]))


def build_space(space_file: str | None = None, fixes: list[str] | None = None) -> SearchSpace:
    """The default space, narrowed by `space_file` (its knobs replace the defaults) and `fixes`."""
    knobs = [dataclasses.replace(k) for k in DEFAULT_KNOBS]
    if space_file:
        knobs = read_space_file(space_file)
    fixed: dict[str, Value] = {}
    for text in fixes or []:
        name, value = parse_fix(text)
        fixed[name] = value
    return SearchSpace(knobs, fixed)


def parse_fix(text: str) -> tuple[str, Value]:
    """`max_num_seqs=256` (dashes allowed in the name) -> ("max_num_seqs", 256), typed by the field."""
    if "=" not in text:
        raise ValueError(f"--set takes NAME=VALUE (e.g. max_num_seqs=256), got {text!r}")
    name, raw = text.split("=", 1)
    name = name.strip().replace("-", "_")
    if name in TUNER_OWNED:
        raise ValueError(f"--set {name}: {TUNER_OWNED[name]}, not --set")
    return name, coerce(name, _from_text(name, raw.strip()))


def read_space_file(path: str | Path) -> list[Knob]:
    """Knobs from a YAML mapping: `max_num_seqs: [64, 128, 256]` or `gpu_memory_utilization: {low: 0.8, high: 0.95}`."""
    import yaml

    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"space file {file} does not exist")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"space file {file} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"space file {file} must map knob names to a list of values or {{low, high}}")
    knobs = []
    for key, spec in data.items():
        name = str(key).replace("-", "_")
        if isinstance(spec, list):
            knobs.append(Knob(name, choices=spec))
        elif isinstance(spec, dict) and {"low", "high"} <= set(spec) and set(spec) <= {"low", "high", "log", "step"}:
            knobs.append(
                Knob(name, low=spec["low"], high=spec["high"], log=bool(spec.get("log", False)), step=spec.get("step"))
            )
        else:
            raise ValueError(
                f"space file {file}: {key} must be a list of values or a mapping with low and high "
                f"(optional log, step), got {spec!r}"
            )
    return knobs


def coerce(name: str, value: Any) -> Value:
    """`value` as the type of setting `name`; an unknown name or a wrong type is a ValueError."""
    kind = _scalar(name)
    allowed = _choices(name)
    if value is None and _optional(name):
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


DEFAULT_SPECULATIVE_TOKENS = 4
"""Tokens a draft proposes per step when the space gives no num_speculative_tokens."""


def engine_default(knob: Knob, fixed: dict[str, Value], searched: set[str]) -> Value:
    """The value a server started without `knob` runs with (the baseline's): the EngineConfig default, and for
    the speculative knobs speculation off (`speculative_method` off). Where speculation is off
    num_speculative_tokens changes nothing: its first choice; where a held method or speculative_config turns it
    on, the count that config gives (DEFAULT_SPECULATIVE_TOKENS where it gives none)."""
    if knob.name == "speculative_method":
        return "off"
    if knob.name == "num_speculative_tokens":
        method = "off" if "speculative_method" in searched else fixed.get("speculative_method")
        if method == "off" or (method is None and fixed.get("speculative_config") is None):
            return knob.choices[0] if knob.choices else knob.low
        config = fixed.get("speculative_config") if method is None else None
        base = (json.loads(config) if isinstance(config, str) else dict(config)) if config else {}  # type: ignore[arg-type]
        return base.get("num_speculative_tokens", DEFAULT_SPECULATIVE_TOKENS)
    return getattr(EngineConfig(), knob.name)


def with_speculation(values: dict[str, Value]) -> dict[str, Value]:
    """`values` with speculative_method / num_speculative_tokens made into speculative_config (JSON). A token
    count alone changes a fixed speculative_config; method `off` turns speculation off."""
    method = values.pop("speculative_method", None)
    k = values.pop("num_speculative_tokens", None)
    if method is None and k is None:
        return values
    if method == "off":
        values["speculative_config"] = None
        return values
    if method is None:
        fixed = values.get("speculative_config")
        if fixed is None:
            raise ValueError(
                "num_speculative_tokens needs speculative_method (ngram or a draft folder) or a fixed "
                "speculative_config"
            )
        base = json.loads(fixed) if isinstance(fixed, str) else dict(fixed)  # type: ignore[arg-type]
    elif method == "ngram":
        base = {"method": "ngram"}
    elif Path(str(method)).expanduser().is_dir():
        base = {"model": str(method)}
    else:
        raise ValueError(f"speculative_method must be off, ngram or a draft model's folder, got {method!r}")
    base["num_speculative_tokens"] = (
        k if k is not None else base.get("num_speculative_tokens", DEFAULT_SPECULATIVE_TOKENS)
    )
    values["speculative_config"] = json.dumps(base)
    return values


def _check_knob(knob: Knob) -> None:
    if knob.name in SPECULATIVE_KNOBS:
        _check_speculative_knob(knob)
        return
    if knob.name in NOT_KNOBS or knob.name not in {f.name for f in dataclasses.fields(EngineConfig)}:
        searchable = sorted({f.name for f in dataclasses.fields(EngineConfig)} - NOT_KNOBS)
        raise ValueError(
            f"{knob.name!r} is not a searchable setting; knobs are EngineConfig fields: {', '.join(searchable)}"
        )
    if knob.choices is not None:
        if not knob.choices:
            raise ValueError(f"knob {knob.name} has an empty list of choices")
        knob.choices = [coerce(knob.name, v) for v in knob.choices]
        for value in knob.choices:  # each value alone must be one the engine accepts
            try:
                EngineConfig(**{knob.name: value})
            except ValueError as exc:
                raise ValueError(f"knob {knob.name}: value {value!r} is impossible: {exc}") from None
        return
    kind = _scalar(knob.name)
    if kind not in (int, float):
        raise ValueError(f"knob {knob.name} is {kind.__name__}: give a list of choices, not a range")
    if not (isinstance(knob.low, (int, float)) and isinstance(knob.high, (int, float)) and knob.low < knob.high):
        raise ValueError(f"knob {knob.name}: low must be a number below high, got low={knob.low!r} high={knob.high!r}")
    if knob.log and knob.low <= 0:
        raise ValueError(f"knob {knob.name}: a log range needs low > 0, got {knob.low}")
    _check_step(knob, kind)
    for value in (knob.low, knob.high):
        try:
            EngineConfig(**{knob.name: int(value) if kind is int else float(value)})
        except ValueError as exc:
            raise ValueError(f"knob {knob.name}: range end {value!r} is impossible: {exc}") from None


def _check_step(knob: Knob, kind: type) -> None:
    """A range's step as optuna takes it: positive, whole for an integer knob, none on a log scale (optuna
    refuses a step other than 1 there, which failed every trial instead of the start)."""
    step = knob.step
    if step is None:
        return
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step < math.inf:
        raise ValueError(f"knob {knob.name}: step must be a positive number, got {step!r}")
    if kind is int and not float(step).is_integer():
        raise ValueError(f"knob {knob.name} takes integers: step must be a whole number, got {step!r}")
    if knob.log and not (kind is int and step == 1):
        raise ValueError(
            f"knob {knob.name}: a log range takes no step (got step {step!r}): drop step, or log for even steps"
        )


def _check_speculative_knob(knob: Knob) -> None:
    if knob.choices is None:
        raise ValueError(f"knob {knob.name}: give a list of choices")
    if not knob.choices:
        raise ValueError(f"knob {knob.name} has an empty list of choices")
    knob.choices = [coerce(knob.name, v) for v in knob.choices]
    for value in knob.choices:
        probe: dict[str, Value] = {"speculative_method": "ngram"}  # a token count is checked with ngram
        probe[knob.name] = value
        try:
            EngineConfig(speculative_config=with_speculation(probe).get("speculative_config"))
        except ValueError as exc:
            raise ValueError(f"knob {knob.name}: value {value!r} is impossible: {exc}") from None


def _hints() -> dict[str, Any]:
    hints: dict[str, Any] = dict(SPECULATIVE_KNOBS)
    for cls in (EngineConfig, ServerConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        hints.update({k: v for k, v in typing.get_type_hints(cls).items() if k in names})
    return hints


def _scalar(name: str) -> type:
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


def _choices(name: str) -> tuple:
    """The allowed values of a Literal field, optional ones (`Literal[...] | None`) included."""
    for cls in (EngineConfig, ServerConfig):
        if name in {f.name for f in dataclasses.fields(cls)}:
            return field_choices(cls, name)
    hint = _hints()[name]  # a speculative knob
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()


def _optional(name: str) -> bool:
    return type(None) in typing.get_args(_hints()[name])


def _from_text(name: str, raw: str) -> Value:
    """A --set value typed by its field: true/false, integers, numbers, or the text."""
    kind = _scalar(name)
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


def sample(knobs: list[Knob], trial: Any) -> dict[str, Value]:
    """One candidate's knob values drawn through an optuna trial."""
    values: dict[str, Value] = {}
    for knob in knobs:
        if knob.choices is not None:
            values[knob.name] = trial.suggest_categorical(knob.name, knob.choices)
        elif knob.is_int:
            values[knob.name] = trial.suggest_int(
                knob.name, int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1)
            )
        else:
            values[knob.name] = trial.suggest_float(
                knob.name, float(knob.low), float(knob.high), log=knob.log, step=knob.step
            )
    return values
