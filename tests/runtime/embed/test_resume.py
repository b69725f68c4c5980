"""`mopt embed` resume: finished rows survive an interruption (Ctrl-C included), and a resume with
another model or other vector-shaping settings is refused instead of mixing vectors in one file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.runtime.embed import Embedder

GATED_MAIN = """
import sys, time
from model_optimizer.runtime.embed.embedder import Embedder
from model_optimizer.cli.main import main

gate, hold_at = sys.argv[1], int(sys.argv[2])
run_batch, calls = Embedder._run_batch, [0]

def held(self, *args, **kwargs):  # a step gate: batch number `hold_at` waits until the test interrupts
    calls[0] += 1
    if calls[0] == hold_at:
        open(gate, "w").close()
        while True:
            time.sleep(0.05)
    return run_batch(self, *args, **kwargs)

Embedder._run_batch = held
sys.exit(main(sys.argv[3:]))
"""


def _write_input(path, num_rows: int) -> list:
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": f"text number {i} " * (1 + i % 5)}) + "\n" for i in range(num_rows))
    )
    return [f"r{i}" for i in range(num_rows)]


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _args(model, src, out, *extra) -> list[str]:
    return [
        "embed",
        "--model",
        str(model),
        "--input",
        str(src),
        "--output",
        str(out),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        *extra,
    ]


def test_rows_of_finished_batches_are_on_disk_when_a_chunk_is_interrupted(qwen3_dir, tmp_path):
    from model_optimizer.runtime.embed.jsonl_job import EmbedJob, JobConfig

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = _write_input(src, 10)
    embedder = Embedder(qwen3_dir, device="cpu", dtype="float32", max_num_seqs=2)
    job = EmbedJob(embedder, JobConfig(input=str(src), output=str(out), chunk_size=1024))
    batches = []

    def interrupt_at_fourth_batch(n: int) -> None:
        batches.append(n)
        if len(batches) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        job.run(interrupt_at_fourth_batch)
    kept = _rows(out)
    assert len(kept) == job.num_written == 6  # three whole batches of two, though the chunk held all ten
    assert {r["id"] for r in kept} < set(ids)

    assert EmbedJob(embedder, JobConfig(input=str(src), output=str(out))).run() == 4
    final = _rows(out)
    assert sorted(r["id"] for r in final) == sorted(ids)  # each id exactly once
    fresh = embedder.encode([f"text number {i} " * (1 + i % 5) for i in range(10)]).embeddings.tolist()
    for row in final:
        assert row["embedding"] == pytest.approx(fresh[int(row["id"][1:])], abs=1e-5)


def _held_run(gate: Path, batch: int, args: list[str]) -> subprocess.Popen:
    """`mopt embed ARGS` in a process of its own (GATED_MAIN), returned once it has reached its `batch`-th
    batch and holds there (the gate file exists)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", GATED_MAIN, str(gate), str(batch), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300  # a guard against a hang, not a speed expectation
    while not gate.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the embed process never reached batch {batch}: {proc.communicate()[1]}")
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_line_and_keeps_finished_rows(qwen3_dir, tmp_path):
    src, out, gate = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "held"
    ids = _write_input(src, 12)
    args = _args(qwen3_dir, src, out, "--max-num-seqs", "2")
    proc = _held_run(gate, 4, args)
    try:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert (
        last == f"mopt embed: interrupted; 6 new rows are in {out}, run the same command again to continue after them"
    )
    assert len(_rows(out)) == 6

    assert main(args) == 0  # resume in this process: the rest, each id once
    assert sorted(r["id"] for r in _rows(out)) == sorted(ids)


def test_resume_with_another_vector_length_is_refused(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src, 4)
    assert main(_args(qwen3_dir, src, out)) == 0
    src.write_text(src.read_text() + json.dumps({"id": "new", "text": "one more"}) + "\n")
    before = out.read_bytes()
    capsys.readouterr()
    assert main(_args(qwen3_dir, src, out, "--dimensions", "8")) == 2
    err = capsys.readouterr().err
    assert "vector length" in err and "64" in err and "8" in err and "another --output" in err
    assert out.read_bytes() == before  # nothing appended


def test_resume_with_another_model_is_refused_and_names_both(qwen3_dir, tiny_model, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src, 4)
    assert main(_args(qwen3_dir, src, out)) == 0
    src.write_text(src.read_text() + json.dumps({"id": "new", "text": "one more"}) + "\n")
    other = tiny_model("qwen2")  # same vector length (64), other weights
    capsys.readouterr()
    assert main(_args(other, src, out)) == 2
    err = capsys.readouterr().err
    assert "model:" in err and str(qwen3_dir.resolve()) in err and str(other.resolve()) in err
    assert len(_rows(out)) == 4


@pytest.mark.parametrize(
    "flags,label",
    [
        (["--pooling", "mean"], "pooling"),
        (["--no-normalize"], "normalize"),
        (["--instruction", "find code"], "instruction"),
    ],
)
def test_resume_with_other_vector_settings_is_refused(qwen3_dir, tmp_path, capsys, flags, label):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src, 3)
    assert main(_args(qwen3_dir, src, out)) == 0
    src.write_text(src.read_text() + json.dumps({"id": "new", "text": "one more"}) + "\n")
    capsys.readouterr()
    assert main(_args(qwen3_dir, src, out, *flags)) == 2
    assert f"{label}:" in capsys.readouterr().err
    assert len(_rows(out)) == 3


def test_a_moved_model_folder_still_resumes_and_the_sidecar_says_what_made_the_file(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    ids = _write_input(src, 5)
    assert main(_args(qwen3_dir, src, out, "--chunk-size", "2")) == 0
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["settings"]["dimensions"] == 64 and meta["settings"]["pooling"] == "last"
    assert meta["info"]["model"] == str(qwen3_dir.resolve()) and meta["info"]["dtype"] == "float32"
    moved = shutil.copytree(qwen3_dir, tmp_path / "moved")
    src.write_text(src.read_text() + json.dumps({"id": "new", "text": "one more"}) + "\n")
    assert main(_args(moved, src, out)) == 0
    assert sorted(r["id"] for r in _rows(out)) == sorted([*ids, "new"])


def test_an_output_without_sidecar_is_checked_by_vector_length(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src, 3)
    out.write_text(json.dumps({"id": "r0", "embedding": [0.5] * 16, "num_tokens": 3}) + "\n")
    assert main(_args(qwen3_dir, src, out)) == 2
    assert "vectors of length [16], this run makes 64" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl.meta.json").exists()

    out.write_text(json.dumps({"id": "r0", "embedding": [0.125] * 64, "num_tokens": 3}) + "\n")
    assert main(_args(qwen3_dir, src, out)) == 0
    assert "has no out.jsonl.meta.json" in capsys.readouterr().err
    assert (tmp_path / "out.jsonl.meta.json").is_file()
    assert sorted(r["id"] for r in _rows(out)) == ["r0", "r1", "r2"]


@pytest.mark.slow
def test_a_second_run_on_the_same_output_is_refused_while_the_first_runs(qwen3_dir, tmp_path, capsys):
    """Two runs on one output both embedded the rows missing when they started and appended them: 36,237
    rows for 20,000 ids, both exiting 0. The first now holds a lock for its whole run; the second is
    refused at once, and once the first is gone (killed: the kernel drops its lock) a run resumes it."""
    src, out, gate = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "held"
    ids = _write_input(src, 12)
    args = _args(qwen3_dir, src, out, "--max-num-seqs", "2")
    proc = _held_run(gate, 2, args)
    try:
        before = out.read_bytes()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"mopt embed: error: --output {out} is being written by another mopt embed run" in err, err
        assert out.read_bytes() == before  # the refused run wrote nothing
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert len(_rows(out)) == 2  # the first run's first batch
    assert main(args) == 0
    assert sorted(r["id"] for r in _rows(out)) == sorted(ids)  # each id once
    assert not (tmp_path / "out.jsonl.lock").exists()  # a finished run takes its lock file away
