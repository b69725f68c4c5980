"""`mopt export-onnx` on bad input: one line `mopt export-onnx: error: ...` and exit code 2 before the
model loads, and no half-written output folder after a failure or Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_optimizer.common.fileio import WRITE_CHECK_PREFIX
from tests.cli_errors import error_line

pytest.importorskip("onnxruntime")


def test_an_opset_without_attention_is_refused_before_the_export(qwen3_dir, tmp_path, capsys):
    """Opsets 11 to 13 passed the check, then the exporter failed on scaled_dot_product_attention
    with a traceback and left an empty --output folder."""
    out = tmp_path / "onnx"
    line = error_line(["export-onnx", "--model", str(qwen3_dir), "--output", str(out), "--opset", "13"], capsys)
    assert "--opset must be between 14 and 21" in line
    assert not out.exists()


def test_output_that_is_the_model_folder(qwen3_dir, tmp_path, capsys):
    """It failed after writing model.onnx into the model folder: '... and ... are the same file'."""
    model = shutil.copytree(qwen3_dir, tmp_path / "model")
    before = sorted(p.name for p in model.iterdir())
    assert "is the model folder" in error_line(["export-onnx", "--model", str(model), "--output", str(model)], capsys)
    assert sorted(p.name for p in model.iterdir()) == before


def test_a_model_without_tokenizer_files(qwen3_dir, tmp_path, capsys):
    """transformers made up an empty tokenizer, which was exported and passed the check."""
    model = shutil.copytree(
        qwen3_dir, tmp_path / "model", ignore=shutil.ignore_patterns("tokenizer*", "chat_template*")
    )
    out = tmp_path / "onnx"
    assert "has no tokenizer files" in error_line(["export-onnx", "--model", str(model), "--output", str(out)], capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    ("sig", "code", "what"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
def test_ctrl_c_or_sigterm_during_the_export_leaves_nothing(qwen3_dir, tmp_path, sig, code, what):
    """SIGTERM (`kill`, `timeout`) ended the process at once and left the staging folder with a partial
    model.onnx beside --output; now it is cleaned up as on Ctrl-C."""
    for attempt in range(3):  # an export that ends between its start and the signal is tried again
        parent = tmp_path / f"parent{attempt}"
        parent.mkdir()
        proc = _export_until_it_has_begun(qwen3_dir, parent / "onnx")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:
            continue
        assert proc.returncode == code, err
        assert list(parent.iterdir()) == [], err
        assert err.strip().splitlines()[-1] == f"mopt export-onnx: {what}; no new file was written to {parent / 'onnx'}"
        return
    pytest.fail("every export ended before it could be interrupted")


def _export_until_it_has_begun(model: Path, out: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "model_optimizer.cli.main", "export-onnx", "--model", str(model)]
    proc = subprocess.Popen(
        [*command, "--output", str(out)],
        cwd=Path(__file__).resolve().parents[3],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 120

    def begun() -> bool:  # the export has begun once anything but the write check appears beside the output
        return any(not p.name.startswith(WRITE_CHECK_PREFIX) for p in out.parent.iterdir())

    while not begun() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None or proc.returncode == 0, proc.communicate()[1]
    return proc


def test_an_empty_output_is_refused_and_the_current_folder_is_left_alone(qwen3_dir, tmp_path, monkeypatch, capsys):
    """--output '' wrote model.onnx, the tokenizer files and the report into the current folder,
    overwriting any of the user's files of those names, and exited 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("mine")
    assert "--output is empty" in error_line(["export-onnx", "--model", str(qwen3_dir), "--output", ""], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json"]
    assert (tmp_path / "tokenizer.json").read_text() == "mine"


def test_an_output_that_cannot_be_written_is_refused_before_the_export(qwen3_dir, capsys):
    """--output /sys/ox failed with a raw errno only after the whole export and check."""
    if not Path("/sys").is_dir():
        pytest.skip("no /sys on this system")
    line = error_line(["export-onnx", "--model", str(qwen3_dir), "--output", "/sys/mopt-onnx"], capsys)
    assert "--output /sys/mopt-onnx: nothing can be written in /sys" in line


@pytest.mark.parametrize("missing", [("onnxruntime",), ("onnx", "onnxruntime")])
def test_missing_onnx_packages_are_one_line_before_the_model_loads(qwen3_dir, tmp_path, capsys, monkeypatch, missing):
    """Without them (they come with the [onnx] extra, not with mopt) the whole export ran, then a traceback."""
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # what `import name` sees when it is not installed
    out = tmp_path / "onnx"
    line = error_line(["export-onnx", "--model", str(qwen3_dir), "--output", str(out)], capsys)
    assert f"export-onnx needs {' and '.join(missing)}, not installed here: pip install onnx onnxruntime" in line
    assert "model-optimizer[onnx]" in line
    assert not out.exists()


@pytest.mark.parametrize("existing", [False, True], ids=["new folder", "existing folder"])
def test_a_second_export_into_one_folder_is_refused_while_the_first_runs(qwen3, tmp_path, existing):
    """Two exports moving their files into one folder would leave it half of each: the second is refused
    before it writes anything (the lock beside a new folder, inside an existing one)."""
    from model_optimizer.common.fileio import run_lock
    from model_optimizer.model.export.onnx import export_folder

    out = tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    lock = out / ".mopt-export.lock" if existing else tmp_path / ".out.lock"
    with run_lock(lock, out, "mopt export-onnx"):  # the first run, holding it
        with pytest.raises(ValueError, match="being written by another mopt export-onnx run"):
            export_folder(qwen3, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["out"] if existing else [])
    assert not existing or sorted(p.name for p in out.iterdir()) == ["notes.txt"]
