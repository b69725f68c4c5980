"""`mopt embed` with rows or flags it cannot honour, on the real MiniLM: an id JSON cannot hold (NaN)
is refused naming its line (it wrote invalid JSON rows), a row over the model's limit is named by its
id (not its position inside a chunk), and a missing --tokenizer folder is called a tokenizer folder."""

from __future__ import annotations

import json
import math

from tests.cli_errors import error_line


def _embed(minilm_dir, tmp_path, text: str, *flags: str) -> list[str]:
    source = tmp_path / "in.jsonl"
    source.write_text(text)
    return [
        "embed",
        "--model",
        str(minilm_dir),
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out.jsonl"),
        *flags,
    ]


def test_a_nan_id_is_refused_naming_its_line(minilm_dir, tmp_path, capsys):
    argv = _embed(minilm_dir, tmp_path, '{"id": 1, "text": "a"}\n{"id": NaN, "text": "b"}\n')
    line = error_line(argv, capsys)
    assert line.endswith("in.jsonl:2: the id holds NaN or Infinity, which JSON cannot carry; give another id")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_row_over_the_limit_is_named_by_its_id(minilm_dir, tmp_path, capsys):
    rows = [{"id": f"a{i}", "text": f"short text {i}"} for i in range(5)]
    rows.insert(3, {"id": "LONG", "text": "word " * 600})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    line = error_line(_embed(minilm_dir, tmp_path, text, "--chunk-size", "2"), capsys)
    assert "in.jsonl: the row with id 'LONG' has 602 tokens, more than the model's limit of 256" in line
    written = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert all(math.isfinite(v) for r in written for v in r["embedding"]) and {r["id"] for r in written} <= {
        "a0",
        "a1",
        "a2",
    }


def test_a_missing_tokenizer_folder_is_named_as_one(minilm_dir, tmp_path, capsys):
    argv = _embed(minilm_dir, tmp_path, '"a"\n', "--tokenizer", str(tmp_path / "nope"))
    assert error_line(argv, capsys).endswith(
        f"tokenizer folder {tmp_path / 'nope'} does not exist (tokenizer, --tokenizer)"
    )
