"""`mopt embed` flows on the real MiniLM: the over-long-row advice (--truncate) resumes the run it stopped,
an input starting with a UTF-8 byte order mark is read, and progress is printed as lines when stderr is not a
terminal."""

from __future__ import annotations

import json

from model_optimizer.cli.main import main
from tests.cli_errors import error_line


def _args(minilm_dir, src, out, *flags: str) -> list[str]:
    return ["embed", "--model", str(minilm_dir), "--input", str(src), "--output", str(out), *flags]


def _rows(path) -> dict:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_the_truncate_advice_resumes_the_run_an_over_long_row_stopped(minilm_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"id": f"s{i}", "text": f"short text number {i}"} for i in range(40)]
    rows += [{"id": "LONG", "text": "word " * 600}] + [{"id": f"t{i}", "text": f"tail {i}"} for i in range(5)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = error_line(_args(minilm_dir, src, out, "--chunk-size", "8"), capsys)
    assert "the row with id 'LONG' has 602 tokens" in line and "(mopt embed --truncate) to cut it" in line
    first = _rows(out)
    assert sorted(first) == sorted(f"s{i}" for i in range(40))  # the chunks before the long row's

    assert main(_args(minilm_dir, src, out, "--chunk-size", "8", "--truncate")) == 0
    assert "resuming: 40 rows" in capsys.readouterr().err
    resumed = _rows(out)
    assert sorted(resumed) == sorted(r["id"] for r in rows) and resumed["LONG"]["num_tokens"] == 256
    assert all(resumed[i] == first[i] for i in first)  # the rows written before are untouched
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["settings"]["truncate_to"] == 256  # rows may be cut from now on: the sidecar says so


def test_truncation_shorter_than_rows_already_written_is_still_refused(minilm_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "word " * 100}) + "\n")
    assert main(_args(minilm_dir, src, out)) == 0
    src.write_text(src.read_text() + json.dumps({"id": "b", "text": "more"}) + "\n")
    line = error_line(_args(minilm_dir, src, out, "--truncate", "--max-seq-length", "64"), capsys)
    assert "truncation length: None in the file, 64 now" in line  # row a (102 tokens) was not cut to 64
    assert sorted(_rows(out)) == ["a"]


def test_an_input_that_starts_with_a_byte_order_mark_is_read(minilm_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes("\ufeff".encode() + b'{"id": "first", "text": "hello"}\n"a bare string"\n')
    assert main(_args(minilm_dir, src, out)) == 0
    written = _rows(out)
    assert sorted(written, key=str) == [1, "first"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"id": "first", "text": "hello"}\n')
    assert main(_args(minilm_dir, plain, tmp_path / "plain_out.jsonl")) == 0
    alone = _rows(tmp_path / "plain_out.jsonl")["first"]
    assert alone["num_tokens"] == written["first"]["num_tokens"] == 3  # the mark is no part of the text
    assert max(abs(a - b) for a, b in zip(alone["embedding"], written["first"]["embedding"])) < 1e-5


def test_progress_is_printed_as_lines_when_stderr_is_no_terminal(minilm_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(f"text number {i}") + "\n" for i in range(20)))
    assert main(_args(minilm_dir, src, out, "--max-num-seqs", "2")) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("mopt embed: ")]
    assert lines[0] == "mopt embed: 2/20 rows done" and lines[-1] == "mopt embed: 20/20 rows done"
    assert len(lines) == 10  # one every tenth of the rows (a batch is two rows)
