"""`mopt doctor --explain` on the errors users of a serving engine paste most, with fixes in our own
flags; and every `mopt` command the doctor tells people to run exists, with the flags it names."""

from __future__ import annotations

import re
import shlex

import doctor_edits as E
import pytest

from model_optimizer.cli.main import build_parser
from model_optimizer.environment import evaluate
from model_optimizer.environment.explain import entries, explain


def _fix_text(match) -> str:
    return "\n".join(line for lines in match.fix.values() for line in lines)


@pytest.mark.parametrize("text,expected,flags", [
    ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
     "cuda_oom", ["--gpu-memory-utilization", "--max-model-len", "--num-kv-blocks", "--max-num-seqs"]),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
     "device_busy", ["CUDA_VISIBLE_DEVICES", "nvidia-smi -c DEFAULT"]),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "cudart_missing", ["nvidia-cuda-runtime-cu12", "LD_LIBRARY_PATH"]),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
     "cudnn_not_initialized", ["--gpu-memory-utilization"]),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "kv_cache_no_memory",
     ["--gpu-memory-utilization", "--max-num-batched-tokens", "--max-num-seqs", "--num-kv-blocks", "--kv-cache-dtype fp8"]),
    ("ValueError: KV-cache budget of -123456 bytes holds no block of 65536 bytes", "kv_cache_no_memory",
     ["--gpu-memory-utilization"]),
])  # fmt: skip
def test_serving_errors_are_explained_with_our_flags(text, expected, flags):
    matches = explain(text)
    assert matches and matches[0].id == expected, [m.id for m in matches]
    fixes = _fix_text(matches[0])
    for flag in flags:
        assert flag in fixes


def _mopt_commands() -> list[str]:
    """Every `mopt ...` command line in the knowledge base's fixes."""
    found = []
    for entry in entries():
        for lines in entry["fix"].values():
            found += [line.split("#")[0].strip() for line in lines if line.startswith("mopt ")]
    return found


def test_every_mopt_command_in_a_fix_parses_with_our_cli():
    commands = _mopt_commands()
    assert len(commands) >= 5
    parser = build_parser()
    for command in commands:
        argv = [re.sub(r"^<.*>$", "x", word) for word in shlex.split(command)[1:]]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the knowledge base tells users to run {command!r}, which mopt does not accept")


def test_no_gpu_text_names_only_commands_that_exist():
    found = {f.id: f for f in evaluate(E.load(E.CPU_SNAPSHOT))}
    why = found["gpu.none"].why
    listed = re.search(r"RAM: (.*?) work with small models", why).group(1)
    names = re.split(r", | and ", listed)
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)
    assert names and set(names) <= subcommands, (names, subcommands)
    assert {"generate", "serve", "bench", "embed"} <= set(names)
