"""Output paths that cannot be written are one clear line and exit code 2, found before any work (a model
load, a calibration, a trial), never a traceback after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from model_optimizer.cli.main import main


def _commands(model: Path, target: Path, rows: Path) -> dict[str, list[str]]:
    return {
        "quantize --output": ["quantize", str(model), "--method", "int8", "--output", str(target)],
        "inspect --fix": ["inspect", str(model), "--fix", str(target)],
        "tune --output-dir": ["tune", "--output-dir", str(target), "--trials", "1"],
        "embed --output": ["embed", "--model", str(model), "--input", str(rows), "--output", str(target / "v.jsonl")],
    }


def _unwritable() -> Path:
    """/sys: no new entries, as root too (a read-only mount, or sysfs refusing them)."""
    sys_dir = Path("/sys")
    if not sys_dir.is_dir():
        pytest.skip("no /sys on this system")
    return sys_dir / "mopt-output"


@pytest.mark.parametrize("flag", ["quantize --output", "inspect --fix", "tune --output-dir", "embed --output"])
@pytest.mark.parametrize("where", ["under a file", "on /sys"])
def test_an_output_path_that_cannot_be_written_is_one_line(tiny_model, tmp_path, capsys, flag, where):
    model = tiny_model("qwen3")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('"hello"\n')
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    target = a_file / "out" if where == "under a file" else _unwritable()
    capsys.readouterr()  # building the tiny model writes progress bars
    assert main(_commands(model, target, rows)[flag]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    option = flag.split()[1]
    assert lines[0].startswith(f"mopt {flag.split()[0]}: error: {option} ")
    expected = f"inside {a_file}, which is a file" if where == "under a file" else "nothing can be written in /sys"
    assert expected in lines[0]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".mopt-write-check")]  # the probe cleans up


def test_generate_paths_and_any_os_error_are_one_line(tiny_model, tmp_path, capsys):
    """generate checks --output before the model loads; under the checks, an OSError escaping any command
    (a path the command did not foresee, a full disk) is one line and code 2, not a traceback."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    model = str(tiny_model("qwen3"))
    capsys.readouterr()
    assert main(["generate", "--model", model, "--prompt", "hi", "--output", str(a_file / "out.jsonl")]) == 2
    assert f"--output {a_file / 'out.jsonl'} is inside {a_file}, which is a file" in capsys.readouterr().err
    assert main(["generate", "--model", model, "--prompts-file", str(tmp_path)]) == 2
    assert "is a folder, not a JSONL file" in capsys.readouterr().err
    # an OSError no check foresees (NotADirectoryError opening the prompts): still one line, code 2
    assert main(["generate", "--model", model, "--prompts-file", str(a_file / "prompts.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "Not a directory" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--prompt", "hi", "--output", ""],
        ["quantize", "{model}", "--method", "int8", "--output", ""],
        ["inspect", "{model}", "--fix", ""],
        ["tune", "--output-dir", "", "--trials", "1"],
        ["bench", "--base-url", "http://127.0.0.1:9", "--output-dir", ""],
        ["deploy", "--output", ""],
        ["export-onnx", "--model", "{model}", "--output", ""],
    ],
    ids=lambda argv: argv[0],
)
def test_an_empty_output_path_is_refused_not_read_as_the_current_folder(tiny_model, tmp_path, capsys, argv):
    """Path("") is "." (and generate's '' was stdout): an unset shell variable wrote into the current folder."""
    model = str(tiny_model("qwen3"))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        capsys.readouterr()
        try:
            code = main([a.format(model=model) for a in argv])
        except SystemExit as exc:  # quantize's --output is typed: argparse's own error line, exit 2
            code = exc.code
        assert code == 2
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert "is empty" in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # nothing written where the user stood


def test_generate_output_to_a_fifo_streams_into_it_and_leaves_it_a_fifo(tiny_model, tmp_path, capsys):
    """Like /dev/null or /dev/stdout: the rename replaced the node with a regular file (as root, /dev/null
    for the whole container)."""
    import stat
    import threading

    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    model = str(tiny_model("qwen3"))
    args = ["generate", "--model", model, "--prompt", "hi", "--max-tokens", "2", "--temperature", "0"]
    assert main([*args, "--kv-cache-memory", str(1 << 22), "--output", str(fifo)]) == 0
    reader.join(timeout=60)
    rows = [line for line in got[0].decode().splitlines() if line]
    assert len(rows) == 1 and '"prompt": "hi"' in rows[0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["results.fifo"]
