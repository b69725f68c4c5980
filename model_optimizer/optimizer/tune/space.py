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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_optimizer.optimizer.tune.setting_types import (
    SPECULATIVE_KNOBS,
    Value,
    coerce,
    from_text,
    setting_type,
)
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig


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
        return setting_type(self.name) is int

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
    return name, coerce(name, from_text(name, raw.strip()))


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
    kind = setting_type(knob.name)
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
