"""What to send: synthetic requests, a replayed JSONL trace, or a ShareGPT file.

`build_workload` turns a `WorkloadConfig` into a list of `BenchRequest`s, prompts already
built, so no tokenizing or random drawing happens while the clock runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from model_optimizer.optimizer.bench.datasets import RawRequest, load_sharegpt, load_trace
from model_optimizer.optimizer.bench.lengths import parse_length
from model_optimizer.optimizer.bench.prompts import TOKEN_ID_OFFSET, PromptMaker
from model_optimizer.runtime.config import check_choice

DEFAULT_OUTPUT_LEN = "128"


@dataclass
class WorkloadConfig:
    """Which requests to send."""

    dataset: Literal["synthetic", "trace", "sharegpt"] = "synthetic"
    """Source of requests: synthetic lengths, a JSONL trace (timestamp, prompt or prompt_len, output_len), or a ShareGPT JSON file."""

    dataset_path: str | None = None
    """Path of the trace or ShareGPT file."""

    prompt_len: str = "256"
    """Synthetic prompt length in tokens: N, uniform:LO:HI, normal:MEAN:STD or hist:LEN=WEIGHT,..."""

    output_len: str | None = None
    """Output length in tokens, same forms as prompt_len. Empty: 128 for synthetic, the file's lengths otherwise."""

    prompt_format: Literal["auto", "token_ids", "text"] = "auto"
    """Send prompts as token-id lists or text; auto: ids for completions and embeddings, text for chat and for files holding text."""

    tokenizer: str | None = None
    """Tokenizer folder (tokenizer.json): builds text prompts of exact token length and counts ShareGPT tokens."""

    random_vocab_size: int | None = None
    """Random prompt token ids are drawn from [100, N), N > 100. Empty: the tokenizer's vocabulary (--tokenizer, a local --model folder, or the folder the server's /v1/models names as root), else [100, 1000), ids every vocabulary has."""

    num_prefix_groups: int = 0
    """Shared-prefix groups: requests in a group start with the same prefix (0: no shared prefixes)."""

    prefix_len: int = 0
    """Tokens in each group's shared prefix, placed before the request's own prompt."""

    prefix_share_ratio: float = 1.0
    """Fraction of requests that take a group prefix; the rest have none."""

    trace_time_unit: Literal["s", "ms"] = "s"
    """Unit of the trace's timestamps."""

    pool_size: int = 1000
    """Distinct requests prepared when the run is limited by duration; they are sent in a cycle (a run that sends more repeats prompts, and says so)."""

    seed: int = 0
    """Seed for lengths, prompts, prefixes and arrival times."""

    def __post_init__(self) -> None:
        check_choice(self, "dataset", "prompt_format", "trace_time_unit")
        parse_length(self.prompt_len, "prompt_len")
        if self.output_len is not None:
            parse_length(self.output_len, "output_len")
        if self.dataset != "synthetic" and not self.dataset_path:
            raise ValueError(f"dataset {self.dataset} needs --dataset-path")
        if self.dataset == "synthetic" and self.dataset_path:  # it was ignored: synthetic prompts were sent
            raise ValueError("--dataset-path needs --dataset trace or --dataset sharegpt (the default is synthetic)")
        synthetic_only = non_default_flags(self, *SYNTHETIC_ONLY)
        if self.dataset != "synthetic" and synthetic_only:  # the file's prompts were sent instead
            raise ValueError(
                f"--dataset {self.dataset} sends the file's prompts and does not use {', '.join(synthetic_only)} "
                "(settings of synthetic prompts; --output-len does override the file's output lengths)"
            )
        if self.pool_size <= 0:
            raise ValueError(f"pool_size must be a positive integer, got {self.pool_size}")
        if self.random_vocab_size is not None and self.random_vocab_size <= TOKEN_ID_OFFSET:
            raise ValueError(
                f"--random-vocab-size must be an integer > {TOKEN_ID_OFFSET} (ids are drawn from "
                f"[{TOKEN_ID_OFFSET}, N): below {TOKEN_ID_OFFSET} most vocabularies keep their special tokens), "
                f"got {self.random_vocab_size}"
            )
        if self.seed < 0:  # numpy's own message ("expected non-negative integer") named no flag
            raise ValueError(f"--seed must be an integer >= 0, got {self.seed}")
        if self.num_prefix_groups < 0 or self.prefix_len < 0:
            raise ValueError("num_prefix_groups and prefix_len must be >= 0")
        if self.num_prefix_groups > 0 and self.prefix_len == 0:
            raise ValueError("num_prefix_groups needs a positive --prefix-len")
        if not 0.0 <= self.prefix_share_ratio <= 1.0:
            raise ValueError(f"prefix_share_ratio must be in [0, 1], got {self.prefix_share_ratio}")


SYNTHETIC_ONLY = ("prompt_len", "num_prefix_groups", "prefix_len", "prefix_share_ratio")
"""WorkloadConfig fields that only synthetic prompts use."""


def non_default_flags(config: object, *names: str) -> list[str]:
    """The flags (--name) among the dataclass fields `names` of `config` that differ from their default.

    A flag the chosen mode would ignore is refused only when set to something else than its default:
    the defaults must work in every mode, and a config rebuilt from a saved one (mopt tune --resume)
    carries every default explicitly."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}  # type: ignore[arg-type]
    return ["--" + name.replace("_", "-") for name in names if getattr(config, name) != defaults[name]]


@dataclass
class BenchRequest:
    """One request ready to send."""

    prompt: str | list[int]
    prompt_len: int
    """Prompt tokens (exact for id lists and tokenizer-built text; an estimate otherwise)."""
    output_len: int
    """max_tokens asked of the server."""
    timestamp: float | None = None
    """Seconds from the start of the trace at which to send it (trace replay)."""
    prefix_group: int | None = None


def prompt_maker(cfg: WorkloadConfig) -> PromptMaker:
    """The prompt builder of `cfg`: its seeded generator, tokenizer and token-id range."""
    return PromptMaker(np.random.default_rng(cfg.seed), cfg.random_vocab_size, cfg.tokenizer)


def build_workload(
    cfg: WorkloadConfig, endpoint: str, num_requests: int | None, maker: PromptMaker | None = None
) -> list[BenchRequest]:
    """Prepare `num_requests` requests (or `pool_size` when None; a trace keeps its own length).

    `maker` (from `prompt_maker(cfg)`) lets the caller read the token-id range it used."""
    maker = maker or prompt_maker(cfg)
    rng = maker.rng
    if cfg.dataset == "synthetic":
        return _synthetic(cfg, endpoint, num_requests or cfg.pool_size, maker)
    if cfg.dataset == "trace":
        raws = load_trace(cfg.dataset_path, cfg.trace_time_unit)  # type: ignore[arg-type]
        if num_requests:
            raws = raws[:num_requests]
    else:
        raws = load_sharegpt(cfg.dataset_path)  # type: ignore[arg-type]
        order = rng.permutation(len(raws))
        count = num_requests or min(cfg.pool_size, len(raws))
        raws = [raws[order[i % len(raws)]] for i in range(count)]
    return _from_raw(cfg, endpoint, raws, maker)


def warmup_requests(
    cfg: WorkloadConfig, endpoint: str, measured: list[BenchRequest], count: int, maker: PromptMaker
) -> list[BenchRequest]:
    """`count` warm-up requests with the lengths of the `measured` ones (cycled) and random prompts from
    `maker` (seeded apart from the run's), never the measured prompts themselves: a trace or ShareGPT
    file holds the same prompts whatever the seed, and sending them first would leave them in the
    server's prefix cache for the measured run."""
    requests = []
    for i in range(count):
        source = measured[i % len(measured)]
        fmt = resolve_format(cfg, endpoint, text_source=isinstance(source.prompt, str))
        prompt, length = _make_prompt(maker, fmt, source.prompt_len)
        requests.append(BenchRequest(prompt, length, source.output_len))
    return requests


def repeated_prompts(requests: list[BenchRequest], sent: list[int]) -> int:
    """How many of the requests sent (their indices `sent`; index i sends requests[i % len(requests)])
    repeated a prompt sent before in the same run. A run that sends more requests than its pool holds
    cycles it, and a server with prefix caching answers a repeat from its cache, faster than a new one."""
    used = {i % len(requests) for i in sent}
    distinct = {_prompt_key(requests[k].prompt) for k in used}
    return len(sent) - len(distinct)


def _prompt_key(prompt: str | list[int]) -> str | tuple[int, ...]:
    return prompt if isinstance(prompt, str) else tuple(prompt)


TEXT_ENDPOINTS = ("chat", "responses")
"""Endpoints whose prompts are text (messages, input), never token ids."""


def resolve_format(cfg: WorkloadConfig, endpoint: str, text_source: bool = False) -> str:
    """The prompt format actually used: token_ids or text."""
    if cfg.prompt_format != "auto":
        if endpoint in TEXT_ENDPOINTS and cfg.prompt_format == "token_ids":
            raise ValueError(f"the {endpoint} endpoint takes text prompts; use --prompt-format text or auto")
        return cfg.prompt_format
    return "text" if endpoint in TEXT_ENDPOINTS or text_source else "token_ids"


def _synthetic(cfg: WorkloadConfig, endpoint: str, n: int, maker: PromptMaker) -> list[BenchRequest]:
    fmt = resolve_format(cfg, endpoint)
    prompt_lens = parse_length(cfg.prompt_len, "prompt_len").sample(maker.rng, n)
    output_lens = parse_length(cfg.output_len or DEFAULT_OUTPUT_LEN, "output_len").sample(maker.rng, n)
    prefixes = [_make_prompt(maker, fmt, cfg.prefix_len) for _ in range(cfg.num_prefix_groups)]
    shares = maker.rng.random(n) < cfg.prefix_share_ratio
    groups = maker.rng.integers(0, max(1, cfg.num_prefix_groups), size=n)
    requests = []
    for i in range(n):
        prompt, length = _make_prompt(maker, fmt, int(prompt_lens[i]))
        group = int(groups[i]) if prefixes and shares[i] else None
        if group is not None:
            prefix, prefix_len = prefixes[group]
            prompt = prefix + (" " if fmt == "text" else []) + prompt  # type: ignore[operator]
            length += prefix_len
        requests.append(BenchRequest(prompt, length, int(output_lens[i]), prefix_group=group))
    return requests


def _make_prompt(maker: PromptMaker, fmt: str, n: int) -> tuple[str | list[int], int]:
    return (maker.token_ids(n), n) if fmt == "token_ids" else maker.text(n)


def _from_raw(cfg: WorkloadConfig, endpoint: str, raws: list[RawRequest], maker: PromptMaker) -> list[BenchRequest]:
    override = parse_length(cfg.output_len, "output_len").sample(maker.rng, len(raws)) if cfg.output_len else None
    requests = []
    for i, raw in enumerate(raws):
        prompt, length = _raw_prompt(raw, cfg, endpoint, maker)
        output_len = raw.output_len or maker.count_tokens(raw.reply or "")
        if override is not None:
            output_len = int(override[i])
        requests.append(BenchRequest(prompt, length, output_len, raw.timestamp))
    return requests


def _raw_prompt(raw: RawRequest, cfg: WorkloadConfig, endpoint: str, maker: PromptMaker) -> tuple[str | list[int], int]:
    """A file's prompt as the endpoint needs it; auto keeps the file's own form where the API allows it."""
    if raw.prompt is None:
        return _make_prompt(maker, resolve_format(cfg, endpoint), raw.prompt_len)  # type: ignore[arg-type]
    fmt = resolve_format(cfg, endpoint, text_source=isinstance(raw.prompt, str))
    if isinstance(raw.prompt, list):
        if fmt == "token_ids":
            return raw.prompt, len(raw.prompt)
        if maker.tokenizer is None:
            raise ValueError("text prompts from a trace of token ids need --tokenizer")
        return maker.tokenizer.decode(raw.prompt), len(raw.prompt)
    if fmt == "text":
        return raw.prompt, maker.count_tokens(raw.prompt)
    if maker.tokenizer is None:
        raise ValueError("token-id prompts from a file of text prompts need --tokenizer")
    ids = maker.tokenizer.encode(raw.prompt, add_special_tokens=False).ids
    return ids, len(ids)
