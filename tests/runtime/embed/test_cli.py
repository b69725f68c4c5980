"""`mopt embed`: JSONL in, JSONL out, resumable after an interruption."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer.cli.main import main
from tests.cli_errors import error_line


def _write_input(path, num_rows: int) -> None:
    lines = []
    for i in range(num_rows):
        if i % 3 == 0:
            lines.append(json.dumps(f"bare string number {i}"))  # id = line number
        else:
            lines.append(json.dumps({"id": f"row-{i}", "text": f"text {i} " * (1 + i % 7)}))
    path.write_text("\n".join(lines) + "\n")


def _read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_embeds_every_row_then_resumes_after_a_torn_write(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src, 30)
    args = [
        "embed",
        "--model",
        str(qwen3_dir),
        "--input",
        str(src),
        "--output",
        str(out),
        "--chunk-size",
        "8",
        "--dtype",
        "float32",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    full = _read(out)  # rows come in the order their batches finish: compare by id
    ids = [0 if i == 0 else i if i % 3 == 0 else f"row-{i}" for i in range(30)]
    assert sorted(map(json.dumps, (r["id"] for r in full))) == sorted(map(json.dumps, ids))
    assert all(len(r["embedding"]) == 64 and r["num_tokens"] > 0 for r in full)

    # interrupted run: 10 rows made it, the 11th was torn mid-write; row 0 marked to prove it is not redone
    kept = full[:10]
    kept[0] = {**kept[0], "embedding": [0.0] * 64}
    torn = json.dumps(full[10])[:25]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept) + torn)
    assert main(args) == 0
    resumed = _read(out)
    assert "resuming: 10 rows" in capsys.readouterr().err
    assert sorted(map(json.dumps, (r["id"] for r in resumed))) == sorted(map(json.dumps, (r["id"] for r in full)))
    assert resumed[0]["embedding"] == [0.0] * 64  # kept, not recomputed
    by_id = {json.dumps(r["id"]): r["embedding"] for r in resumed}
    for r in full[1:]:
        assert torch.allclose(torch.tensor(by_id[json.dumps(r["id"])]), torch.tensor(r["embedding"]), atol=1e-5)


def test_dimensions_flag_and_bad_input_are_clear(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"text": "fine"}\n{"txt": "wrong field"}\n')
    base = ["embed", "--model", str(qwen3_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
    assert main(base) == 2
    assert "in.jsonl:2: expected a JSON string or an object with a string field 'text'" in capsys.readouterr().err
    src.write_text('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')
    assert main(base) == 2
    assert "appears twice" in capsys.readouterr().err
    src.write_text('{"id": 1, "text": "a"}\n')
    assert main(base + ["--dimensions", "8"]) == 0
    assert len(_read(out)[0]["embedding"]) == 8


@pytest.mark.slow
def test_bad_paths_and_bytes_are_clear_errors(qwen3_dir, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "fine"}\n')
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    base = ["embed", "--model", str(qwen3_dir), "--device", "cpu"]
    cases = [
        (["--input", str(src), "--output", str(tmp_path)], f"--output {tmp_path} is a folder"),
        (["--input", str(src), "--output", str(a_file / "out.jsonl")], f"is inside {a_file}, which is a file"),
        (["--input", str(tmp_path), "--output", str(tmp_path / "o.jsonl")], f"--input {tmp_path} is a folder"),
        (
            ["--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--chunk-size", "0"],
            "chunk_size must be a positive",
        ),
        (
            ["--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--dimensions", "0"],
            "dimensions must be a positive",
        ),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    src.write_bytes(b'{"text": "fine"}\n{"text": "\xff\xfe"}\n')
    assert main(base + ["--input", str(src), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert f"{src}:2: not UTF-8 text" in capsys.readouterr().err


def test_a_blank_or_non_unicode_row_is_one_clear_error(qwen3_dir, tmp_path, capsys):
    """As the server refuses such an input (400), `mopt embed` refuses such a row, naming its line, before
    any row is embedded: no traceback, exit code 2, no output rows."""
    for row, expected in (
        (json.dumps(""), "the text is empty or blank"),
        (json.dumps({"id": "r", "text": " \u200b\t"}), "the text is empty or blank"),
        (json.dumps("\ud800"), "the text is not valid Unicode"),
        (json.dumps({"id": "\udc00", "text": "fine"}), "the id is not valid Unicode"),
    ):
        src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        src.write_text(json.dumps("a good row") + "\n" + row + "\n")
        out.unlink(missing_ok=True)
        args = ["embed", "--model", str(qwen3_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{src}:2: {expected}" in err and "Traceback" not in err, err
        assert not out.exists() or out.read_text() == ""


def test_too_many_dimensions_are_refused_before_any_file_is_made(qwen3_dir, tmp_path, capsys):
    """--dimensions over the model's size failed after the model loaded and left an empty output and a
    sidecar recording the refused length."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('"a"\n')
    args = ["embed", "--model", str(qwen3_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
    line = error_line([*args, "--dimensions", "100000"], capsys)
    assert line.endswith("--dimensions 100000 is more than the model's 64; give 1 to 64")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_run_that_fails_before_its_first_row_leaves_no_files(qwen3_dir, tmp_path, capsys):
    """A row over the model's limit in the first batch: no empty output or sidecar is left behind."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"id": "LONG", "text": "word " * 5000}) + "\n")
    args = ["embed", "--model", str(qwen3_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
    assert "the row with id 'LONG'" in error_line(args, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_output_dash_is_refused_not_a_file_named_dash(qwen3_dir, tmp_path, monkeypatch, capsys):
    """`generate --output -` means stdout; `embed --output -` made a file named '-'. embed appends to its
    output and reads it back to resume, which stdout cannot do, so '-' is refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text('"a"\n')
    line = error_line(["embed", "--model", str(qwen3_dir), "--input", "in.jsonl", "--output", "-"], capsys)
    assert "--output - (stdout) is not supported" in line and "./-" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.timeout(60)  # were the check gone, reading the FIFO back would wait forever
def test_a_stream_output_or_input_is_refused_before_anything_is_made(qwen3_dir, tmp_path, monkeypatch, capsys):
    """`--output /dev/stdout` (or a FIFO) waited forever reading the output back to resume, after making a
    lock file beside it (in /dev, for /dev/stdout); a piped --input was said not to exist."""
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text('"a"\n')
    os.mkfifo(tmp_path / "fifo")
    args = ["embed", "--model", str(qwen3_dir), "--device", "cpu"]
    line = error_line([*args, "--input", "in.jsonl", "--output", "fifo"], capsys)
    assert line.endswith(
        "--output fifo is a pipe or device, not a file: mopt embed reads its input as a file and "
        "appends to its output, reading it back to resume; give file paths"
    )
    assert "--input fifo is a pipe or device" in error_line([*args, "--input", "fifo", "--output", "o.jsonl"], capsys)
    assert "--input - (stdin) is not supported" in error_line([*args, "--input", "-", "--output", "o.jsonl"], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "in.jsonl"]
