"""`--speculative-config`: vLLM's JSON object, read into a checked SpeculativeConfig.

Two methods: `ngram` (prompt lookup: the tokens that followed the latest earlier occurrence of the
request's last n tokens, n from prompt_lookup_max down to prompt_lookup_min) and `draft_model` (a
smaller checkpoint with the same vocabulary, named by `model`; the method may be left out then).
Everything that can be checked without loading a model is checked here, so a typo fails at start-up
with a message that says what is allowed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Any

MAX_SPECULATIVE_TOKENS = 16
"""More proposals than this per step would never be accepted often enough to pay for their compute."""

METHODS = ("ngram", "draft_model")
NOT_SUPPORTED = ("eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "deepseek_mtp", "suffix")

ACCEPTANCE_ENV = "MOPT_SPEC_ACCEPTANCE"
"""Benchmarks only: the verifier ignores the target and accepts each proposal with this probability
(0..1, independently per position, up to the first rejection). The token after the accepted ones is
still the target's, so each step costs what it would at that acceptance rate, but the output is no
longer the target's. Sweeps speedup against acceptance (benchmarks/spec_decode.py)."""


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    """ngram or draft_model."""
    num_speculative_tokens: int
    """Proposals verified per step and request (k): a step yields 1 to k + 1 tokens."""
    model: str | None = None
    """Draft checkpoint (draft_model): a folder or a Hugging Face Hub id, as the target's --model; same vocabulary
    as the target, any smaller size."""
    prompt_lookup_min: int = 5
    """ngram: shortest suffix of the request's tokens looked up. Both bounds default to 5, vLLM's values
    (untuned there; we have measured none better); one given alone sets both, as in vLLM."""
    prompt_lookup_max: int = 5
    """ngram: longest suffix looked up (tried first)."""
    disable_by_batch_size: int | None = None
    """Do not speculate in steps with this many running requests or more (vLLM's knob)."""
    adaptive: bool = True
    """Measure tokens/s per batch size with and without speculation and speculate only where it is faster
    (an extension of ours; left out of the flags `mopt deploy` gives vLLM)."""

    @property
    def is_draft_model(self) -> bool:
        return self.method == "draft_model"


def parse_speculative_config(value: str | dict | None) -> SpeculativeConfig | None:
    """The config given as a JSON string (the CLI flag) or a mapping (Python, a config file); None when unset.

    Raises ValueError naming the key that is wrong and what is allowed."""
    if value is None or value == "" or value == {}:
        return None
    data = _as_mapping(value)
    allowed = {f.name for f in fields(SpeculativeConfig)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"speculative_config: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    method = data.get("method") or ("draft_model" if data.get("model") else None)
    if method in NOT_SUPPORTED:
        raise ValueError(f"speculative_config: method {method!r} is not supported; supported: {', '.join(METHODS)}")
    if method not in METHODS:
        raise ValueError(
            f"speculative_config: method must be one of {', '.join(METHODS)} (or leave it out and give a draft "
            f"'model'), got {data.get('method')!r}"
        )
    k = data.get("num_speculative_tokens")
    if not _is_int(k) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise ValueError(
            f"speculative_config: num_speculative_tokens must be an integer in [1, {MAX_SPECULATIVE_TOKENS}], got {k!r}"
        )
    values: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method == "draft_model":
        values["model"] = _draft_model(data)
    elif data.get("model") is not None:
        raise ValueError("speculative_config: 'model' names a draft checkpoint; method ngram takes none")
    else:
        values.update(_lookup_bounds(data))
    if data.get("disable_by_batch_size") is not None:
        size = data["disable_by_batch_size"]
        if not _is_int(size) or size < 1:
            raise ValueError(f"speculative_config: disable_by_batch_size must be an integer >= 1, got {size!r}")
        values["disable_by_batch_size"] = size
    if "adaptive" in data:
        if not isinstance(data["adaptive"], bool):
            raise ValueError(f"speculative_config: adaptive must be true or false, got {data['adaptive']!r}")
        values["adaptive"] = data["adaptive"]
    return SpeculativeConfig(**values)


def injected_acceptance() -> float | None:
    """The benchmark-only forced acceptance rate (ACCEPTANCE_ENV), or None when unset."""
    text = os.environ.get(ACCEPTANCE_ENV, "").strip()
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"{ACCEPTANCE_ENV} must be a number in [0, 1], got {text!r}")
    return rate


def _as_mapping(value: str | dict) -> dict:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise ValueError(f"speculative_config must be a JSON object (string) or a mapping, got {value!r}")
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"speculative_config is not valid JSON ({exc.msg}); e.g. "
            '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\''
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"speculative_config must be a JSON object, got {value!r}")
    return data


def _draft_model(data: dict) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("speculative_config: method draft_model needs 'model', the draft checkpoint's folder")
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if data.get(key) is not None:
            raise ValueError(f"speculative_config: {key} is an ngram setting; method draft_model takes none")
    return model


def _lookup_bounds(data: dict) -> dict[str, int]:
    """vLLM's rule: neither bound given, the fields' defaults; one given, both take its value; both, as given."""
    low, high = data.get("prompt_lookup_min"), data.get("prompt_lookup_max")
    for key, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
        if value is not None and (not _is_int(value) or value < 1):
            raise ValueError(f"speculative_config: {key} must be an integer >= 1, got {value!r}")
    if low is None and high is None:
        return {}
    low = high if low is None else low
    high = low if high is None else high
    if low > high:
        raise ValueError(f"speculative_config: prompt_lookup_min ({low}) must not exceed prompt_lookup_max ({high})")
    return {"prompt_lookup_min": low, "prompt_lookup_max": high}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def to_json(spec: SpeculativeConfig, model: str | None = None, for_vllm: bool = False) -> str:
    """The config as `--speculative-config` JSON, every setting explicit (so another server behaves the same);
    `model` replaces the draft folder (a container's mount point). `for_vllm` leaves out what vLLM lacks."""
    data: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.is_draft_model:
        data["model"] = model or spec.model
    else:
        data["prompt_lookup_min"], data["prompt_lookup_max"] = spec.prompt_lookup_min, spec.prompt_lookup_max
    if spec.disable_by_batch_size is not None:
        data["disable_by_batch_size"] = spec.disable_by_batch_size
    if not spec.adaptive and not for_vllm:
        data["adaptive"] = False
    return json.dumps(data)
