"""vLLM engine settings that scripts and command lines written for vLLM pass, and this engine has no use
for: `LLM(model, trust_remote_code=True)` and `mopt serve MODEL --trust-remote-code` take them, and one
warning line names them with why they change nothing. A value asking for what this engine does not do
(pipeline parallelism, LoRA adapters) is refused with the reason instead of being ignored.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VllmSetting:
    name: str
    why: str
    """Why it changes nothing here (said in the warning)."""
    kind: type = bool
    """The flag's value type for `mopt serve` (bool: a switch)."""
    refuse: Callable[[Any], str | None] | None = None
    """A reason to refuse the value given, or None to take it."""
    short: str = ""
    """vLLM's short flag (-pp), if it has one."""
    server_only: bool = False
    """A flag of vLLM's server alone: `mopt serve` takes it, `LLM(...)` does not (vLLM's LLM has no such
    argument either, so it stays a TypeError there)."""
    llm_only: bool = False
    """A setting of vLLM's LLM that `mopt serve` has a flag of its own for (max_logprobs: --max-logprobs): not
    added to the server's vLLM flags."""
    nargs: str | None = None
    """The flag's nargs as vLLM declares it ("+": several values; "?": a value, or `const` alone)."""
    const: Any = None
    """With nargs "?": the value of the flag given alone (vLLM's --hf-token: the cached login)."""


def _more_than_one(name: str, why: str) -> Callable[[Any], str | None]:
    def refuse(value: Any) -> str | None:
        if value in (None, 1):
            return None
        if isinstance(value, int) and value > 1:
            return f"{name} > 1 is not supported ({why})"
        return f"{name} must be 1 here, got {value!r}"

    return refuse


def _lora(value: Any) -> str | None:
    return "LoRA adapters are not supported: merge the adapter into the weights first" if value else None


def _given(value: Any) -> bool:
    """Whether a setting's value asks for something: not None, False or an empty string, list or object
    (vLLM's defaults, as launchers and dumped configs pass them); 0 is a value."""
    if value is None or value is False:
        return False
    return not (isinstance(value, (str, list, dict)) and not value)


def _unless(taken: tuple, reason: str) -> Callable[[Any], str | None]:
    """Refuse any value but an empty one (None, False, "", [], {}: vLLM's own defaults, as a launcher or a
    dumped config passes them) and those in `taken`, with `reason`."""

    def refuse(value: Any) -> str | None:
        return None if not _given(value) or value in taken else f"{reason} (got {value!r})"

    return refuse


def _empty_json(name: str, instead: str) -> Callable[[Any], str | None]:
    """Take an empty JSON object (or list), as a default a launcher passes; refuse one that asks for something."""

    def refuse(value: Any) -> str | None:
        if value is None:
            return None
        try:
            parsed = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            return f"{name} must be JSON, got {value!r}"
        return None if parsed in ({}, [], None) else f"{name} is not supported here: {instead}"

    return refuse


def _at_most_max_logprobs(value: Any) -> str | None:
    from model_optimizer.runtime.sampling_params import MAX_LOGPROBS

    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LOGPROBS:
        return None
    return f"max_logprobs must be in [0, {MAX_LOGPROBS}] here (logprobs are capped at {MAX_LOGPROBS}), got {value!r}"


def _tokenizer_mode(value: Any) -> str | None:
    if value in (None, "auto", "hf"):
        return None
    return f"tokenizer_mode {value!r} is not supported: the tokenizer is read from tokenizer.json (mode 'auto')"


SETTINGS = (
    VllmSetting("trust_remote_code", "checkpoints run on this engine's own model code, never on code from the folder"),
    VllmSetting("disable_log_stats", "mopt serve logs stats every --log-interval seconds; LLM logs none"),
    VllmSetting("disable_log_requests", "requests are not logged one by one"),
    VllmSetting("swap_space", "preempted requests are recomputed, or kept in --kv-offloading-size host memory", float),
    VllmSetting("max_seq_len_to_capture", "decode CUDA graphs serve every sequence length", int),
    VllmSetting("disable_custom_all_reduce", "the all-reduce is chosen by --one-shot-all-reduce"),
    VllmSetting("distributed_executor_backend", "tensor-parallel ranks are always processes of this host", str),
    VllmSetting("download_dir", "Hub downloads go to the Hugging Face cache (HF_HOME)", str),
    VllmSetting("task", "the model folder says whether it generates or embeds", str),
    VllmSetting("tokenizer_mode", "the tokenizer is read from tokenizer.json", str, _tokenizer_mode),
    VllmSetting(
        "pipeline_parallel_size",
        "only 1 is taken: tensor_parallel_size splits a model here",
        int,
        _more_than_one("pipeline_parallel_size", "tensor_parallel_size splits a model here"),
        "-pp",
    ),
    VllmSetting(
        "data_parallel_size",
        "only 1 is taken: run one server per replica",
        int,
        _more_than_one("data_parallel_size", "run one server per replica"),
        "-dp",
    ),
    VllmSetting("enable_lora", "only off is taken: merge adapters into the weights", bool, _lora),
    VllmSetting(
        "max_logprobs", "logprobs are capped at 20 (SamplingParams' bound)", int, _at_most_max_logprobs, llm_only=True
    ),
    VllmSetting("uvicorn_log_level", "uvicorn logs at --log-level, in the server's format", str),
    VllmSetting("disable_uvicorn_access_log", "the access log follows --log-level (warning turns it off)"),
    VllmSetting("enable_log_requests", "requests are not logged one by one"),
    VllmSetting("max_log_len", "requests are not logged one by one", int),
    VllmSetting("compilation_config", "kernels are Triton and CUDA graphs, set by --enforce-eager", str),
    VllmSetting("max_cudagraph_capture_size", "decode CUDA graphs are captured up to --max-num-seqs rows", int),
    VllmSetting("tokenizer_revision", "the tokenizer comes with the model's --revision, or from --tokenizer", str),
    VllmSetting("code_revision", "no code is run from the model's folder or the Hub", str),
    VllmSetting(
        "hf_token",
        "Hub downloads read the token from HF_TOKEN (or `hf auth login`): set it there",
        str,
        nargs="?",
        const="true",
    ),  # fmt: skip
    VllmSetting("max_parallel_loading_workers", "weights load shard by shard in each rank", int),
    VllmSetting(
        "model_impl",
        "models run on this engine's own code",
        str,
        _unless(("auto", "vllm"), "model_impl 'transformers' is not supported: models run on this engine's own code"),
    ),  # fmt: skip
    VllmSetting(
        "config_format",
        "config.json is read",
        str,
        _unless(("auto", "hf"), "config_format: only config.json (auto, hf) is read"),
    ),  # fmt: skip
    VllmSetting(
        "hf_overrides",
        "an empty override changes nothing",
        str,
        _empty_json("hf_overrides", "edit the model folder's config.json (a copy of the folder)"),
    ),  # fmt: skip
    VllmSetting(
        "rope_scaling",
        "an empty setting changes nothing",
        str,
        _empty_json("rope_scaling", "set rope_scaling in the model folder's config.json"),
    ),  # fmt: skip
    VllmSetting(
        "disable_sliding_window",
        "only off is taken",
        bool,
        _unless((), "disable_sliding_window is not supported: sliding windows apply as the model's config says"),
    ),  # fmt: skip
    VllmSetting(
        "prefix_caching_hash_algo",
        "prefix-cache block keys are 64-bit hashes of the token ids, not cryptographic ones, whatever this says",
        str,
    ),  # fmt: skip
    VllmSetting("disable_cascade_attn", "there is no cascade attention to turn off"),
    VllmSetting("calculate_kv_scales", "an fp8 KV cache's scales are the checkpoint's, else 1.0; none are computed"),
    VllmSetting(
        "kv_transfer_config",
        "an empty setting changes nothing",
        str,
        _empty_json(
            "kv_transfer_config", "there is no disaggregated prefill: run vLLM for it (mopt deploy --engine vllm)"
        ),
    ),  # fmt: skip
    VllmSetting("additional_config", "platform plugins are not loaded", str),
    VllmSetting("limit_mm_per_prompt", "models here take text only", str),
    VllmSetting("mm_processor_kwargs", "models here take text only", str),
    VllmSetting("guided_decoding_backend", "structured outputs always run on llguidance", str),
    VllmSetting("structured_outputs_config", "structured outputs always run on llguidance", str),
    VllmSetting("enable_reasoning", "--reasoning-parser alone turns reasoning on", bool),
    VllmSetting("enable_sleep_mode", "there is no sleep mode (/sleep, /wake_up are not served)"),
    VllmSetting("otlp_traces_endpoint", "no OpenTelemetry traces; /metrics serves Prometheus metrics", str),
    VllmSetting("collect_detailed_traces", "no OpenTelemetry traces", str),
    VllmSetting(
        "disable_frontend_multiprocessing", "the engine core always runs in a process of its own", server_only=True
    ),  # fmt: skip
    VllmSetting(
        "enable_server_load_tracking", "no /load route; /metrics counts running and waiting requests", server_only=True
    ),  # fmt: skip
    VllmSetting("enable_log_outputs", "requests and outputs are not logged one by one", server_only=True),
    VllmSetting("log_config_file", "logs take one format; --log-level sets the level", str, server_only=True),
    VllmSetting("h11_max_incomplete_event_size", "--max-header-bytes bounds request heads", int, server_only=True),
    VllmSetting("h11_max_header_count", "--max-header-bytes bounds request heads", int, server_only=True),
    VllmSetting(
        "middleware", "", str, _unless((), "middleware: custom ASGI middleware is not loaded"), server_only=True
    ),  # fmt: skip
    VllmSetting(
        "lora_modules",
        "",
        str,
        _unless((), "lora_modules: LoRA adapters are not supported (merge the adapter into the weights first)"),
        nargs="+",
        server_only=True,
    ),  # fmt: skip
    VllmSetting(
        "tool_parser_plugin",
        "",
        str,
        _unless((), "tool_parser_plugin: parser plugins are not loaded (--tool-call-parser names the built-in ones)"),
        server_only=True,
    ),  # fmt: skip
    VllmSetting(
        "reasoning_parser_plugin",
        "",
        str,
        _unless(
            (), "reasoning_parser_plugin: parser plugins are not loaded (--reasoning-parser names the built-in ones)"
        ),
        server_only=True,
    ),  # fmt: skip
    VllmSetting(
        "enable_force_include_usage",
        "",
        bool,
        _unless(
            (),
            "enable_force_include_usage is not supported: "
            "a request asks for usage with stream_options.include_usage (non-streamed responses always "
            "carry it)",
        ),
        server_only=True,
    ),  # fmt: skip
)
BY_NAME = {s.name: s for s in SETTINGS}
SERVER_FLAGS = [s for s in SETTINGS if not s.llm_only]
"""The settings `mopt serve` takes as vLLM flags."""


def split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the settings that are not vLLM-only, the vLLM-only ones among `kwargs`): `LLM(...)`'s keywords,
    where vLLM's server-only flags are not settings (so they stay unknown keywords)."""
    engine = {name for name, s in BY_NAME.items() if not s.server_only}
    return {k: v for k, v in kwargs.items() if k not in engine}, {k: v for k, v in kwargs.items() if k in engine}


def plain_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`LLM(...)`'s keywords with the values vLLM code passes read as EngineConfig takes them: a torch dtype
    (`dtype=torch.float16`) by its name, and `seed=None` as not given."""
    out = dict(kwargs)
    dtype = out.get("dtype")
    if type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype":
        out["dtype"] = str(dtype).removeprefix("torch.")
    if "seed" in out and out["seed"] is None:
        del out["seed"]
    return out


def ignored(given: dict[str, Any]) -> list[str]:
    """`name (why)` for each vLLM-only setting given (unset switches and None values skipped); ValueError
    naming the first whose value asks for what this engine does not do."""
    notes = []
    for name, value in given.items():
        setting = BY_NAME[name]
        reason = setting.refuse(value) if setting.refuse is not None else None
        if reason:
            raise ValueError(reason)
        if _given(value):
            notes.append(f"{name} ({setting.why})")
    return notes


ONLY_ON = {"disable_log_stats", "enable_reasoning"}
"""Switches without a --no- form: vLLM 0.14.1 adds --disable-log-stats with store_true and no longer has
--enable-reasoning; every other switch here is a config dataclass's bool, which vLLM parses with
BooleanOptionalAction (--trust-remote-code / --no-trust-remote-code)."""


def add_args(parser: argparse.ArgumentParser) -> None:
    """The settings as `mopt serve` flags, in a group of their own, so a `vllm serve` command line runs."""
    group = parser.add_argument_group("vLLM flags taken for compatibility (each changes nothing here; see the warning)")
    for s in SERVER_FLAGS:
        flags = ("--" + s.name.replace("_", "-"), s.short) if s.short else ("--" + s.name.replace("_", "-"),)
        if s.kind is bool:  # --no-X too where vLLM's switch has it (argparse.BooleanOptionalAction)
            action = "store_true" if s.name in ONLY_ON else argparse.BooleanOptionalAction
            group.add_argument(*flags, dest=s.name, action=action, default=None, help=s.why)
        else:
            shape = {"nargs": s.nargs, "const": s.const} if s.nargs == "?" else {"nargs": s.nargs} if s.nargs else {}
            group.add_argument(
                *flags, dest=s.name, type=s.kind, default=None, metavar=s.name.upper(), help=s.why, **shape
            )


def from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The vLLM-only flags given on a command line made by add_args."""
    return {s.name: getattr(args, s.name) for s in SERVER_FLAGS if getattr(args, s.name, None) is not None}
