"""Ctrl-C: `mopt` exits 130 with one line and no traceback; `mopt generate --output` keeps the
results that were complete, written atomically. Real processes, real SIGINT; each test waits for an
event (a reader on a FIFO, a progress line), never for a time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest

TIMEOUT = 600  # seconds; only a hang reaches it


def _mopt(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MOPT_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for_stderr_line(proc: subprocess.Popen, needle: str) -> list[str]:
    """Read stderr lines until one contains `needle`; the lines read so far."""
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"process ended without printing {needle!r}: {''.join(lines)}")


def _finish(proc: subprocess.Popen, lines: list[str]) -> tuple[str, str]:
    out, err = proc.communicate(timeout=TIMEOUT)
    return out, "".join(lines) + err


def test_ctrl_c_while_reading_prompts_exits_130_without_traceback(tmp_path):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    proc = _mopt("generate", "--prompts-file", str(fifo))
    # the process has opened the FIFO for reading once opening it for writing stops failing with ENXIO
    writer = None
    while writer is None:
        assert proc.poll() is None, proc.communicate()
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            threading.Event().wait(0.01)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(writer)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip() == "mopt generate: interrupted"


@pytest.mark.slow
def test_ctrl_c_during_generation_keeps_completed_results(tiny_model, tmp_path):
    prompts = tmp_path / "in.jsonl"
    # the first prompt ends after one token; the other 999 each run to the end of the context
    rows = [{"prompt_token_ids": [5, 6], "max_tokens": 1}] + [
        {"prompt_token_ids": [5 + i % 900, 7]} for i in range(999)
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    out.write_text("an older result\n")
    proc = _mopt(
        "generate",
        "--model",
        str(tiny_model("qwen3")),
        "--prompts-file",
        str(prompts),
        "--output",
        str(out),
        "--max-tokens",
        "None",
        "--ignore-eos",
        "--max-num-seqs",
        "4",
        "--kv-cache-memory",
        str(1 << 22),
    )
    lines = _wait_for_stderr_line(proc, "1/1000 prompts done")
    proc.send_signal(signal.SIGINT)
    _, err = _finish(proc, lines)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mopt generate: interrupted; ") and str(out) in last
    results = [json.loads(line) for line in out.read_text().splitlines()]  # every line is whole JSON
    assert 1 <= len(results) < 1000
    assert results[0]["prompt_index"] == 0 and results[0]["outputs"][0]["token_ids"].__len__() == 1
    assert all(r["outputs"][0]["finish_reason"] == "length" for r in results)
    assert [r["prompt_index"] for r in results] == sorted(r["prompt_index"] for r in results)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_ctrl_c_before_any_prompt_finished_says_nothing_was_written(tiny_model, tmp_path):
    """One long prompt, interrupted while it runs: nothing was printed, and the message must say so."""
    model = tmp_path / "qwen3"
    shutil.copytree(tiny_model("qwen3"), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 32768}))
    # 32k tokens (32 MB of KV cache): far more than the moment the signal takes to arrive
    proc = _mopt(
        "generate",
        "--model",
        str(model),
        "--prompt",
        "hello",
        "--max-tokens",
        "None",
        "--ignore-eos",
        "--max-model-len",
        "32768",
    )
    lines = _wait_for_stderr_line(proc, "generating for 1 prompt")
    proc.send_signal(signal.SIGINT)
    out, err = _finish(proc, lines)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and out == ""
    last = err.strip().splitlines()[-1]
    assert last == "mopt generate: interrupted; none had finished; nothing was written", last
