"""vLLM engine settings that scripts and command lines written for vLLM pass, and this engine has no use
for: `LLM(model, trust_remote_code=True)` and `mopt serve MODEL --trust-remote-code` take them, and one
warning line names them with why they change nothing. A value asking for what this engine does not do
(pipeline parallelism, LoRA adapters) is refused with the reason instead of being ignored.
"""

from __future__ import annotations

import argparse
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
    VllmSetting("uvicorn_log_level", "uvicorn logs at --log-level, in the server's format", str),
    VllmSetting("disable_uvicorn_access_log", "the access log follows --log-level (warning turns it off)"),
    VllmSetting("enable_log_requests", "requests are not logged one by one"),
    VllmSetting("max_log_len", "requests are not logged one by one", int),
    VllmSetting("compilation_config", "kernels are Triton and CUDA graphs, set by --enforce-eager", str),
    VllmSetting("max_cudagraph_capture_size", "decode CUDA graphs are captured up to --max-num-seqs rows", int),
)
BY_NAME = {s.name: s for s in SETTINGS}


def split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the settings that are not vLLM-only, the vLLM-only ones among `kwargs`)."""
    ours = {k: v for k, v in kwargs.items() if k not in BY_NAME}
    return ours, {k: v for k, v in kwargs.items() if k in BY_NAME}


def ignored(given: dict[str, Any]) -> list[str]:
    """`name (why)` for each vLLM-only setting given (unset switches and None values skipped); ValueError
    naming the first whose value asks for what this engine does not do."""
    notes = []
    for name, value in given.items():
        setting = BY_NAME[name]
        reason = setting.refuse(value) if setting.refuse is not None else None
        if reason:
            raise ValueError(reason)
        if value is not None and value is not False:
            notes.append(f"{name} ({setting.why})")
    return notes


def add_args(parser: argparse.ArgumentParser) -> None:
    """The settings as `mopt serve` flags, in a group of their own, so a `vllm serve` command line runs."""
    group = parser.add_argument_group("vLLM flags taken for compatibility (each changes nothing here; see the warning)")
    for s in SETTINGS:
        flags = ("--" + s.name.replace("_", "-"), s.short) if s.short else ("--" + s.name.replace("_", "-"),)
        if s.kind is bool:
            group.add_argument(*flags, dest=s.name, action="store_true", default=None, help=s.why)
        else:
            group.add_argument(*flags, dest=s.name, type=s.kind, default=None, metavar=s.name.upper(), help=s.why)


def from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The vLLM-only flags given on a command line made by add_args."""
    return {s.name: getattr(args, s.name) for s in SETTINGS if getattr(args, s.name, None) is not None}
