"""A resumable JSONL embedding job: the work behind `mopt embed`.

Input: one row per line, a JSON object with a text field (default "text") and an optional id field
(default "id"; the 0-based line number when absent), or a bare JSON string.
Output: one JSON object per line, {"id", "embedding", "num_tokens"}, in input order per chunk.

Crash safety: each chunk is appended with a single write, then flushed and fsynced, so a kill
loses at most the chunk in flight. A kill in the middle of that write can leave a torn last line;
the next run cuts the file back to its last complete row before resuming, and skips every id the
output already holds. (Rewriting the whole file per chunk through a temp file would make a large
job quadratic in its output size; appending keeps it linear.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_optimizer.fileio import jsonl_values


@dataclass
class JobConfig:
    """One `mopt embed` run: files and per-request options."""

    input: str = ""
    """JSONL file to embed: one object per line with a text field (or a bare JSON string)."""
    output: str = ""
    """JSONL file to write; rows already in it are skipped (resume)."""
    text_field: str = "text"
    """Field of each input row holding the text."""
    id_field: str = "id"
    """Field of each input row holding its id; rows without one get their 0-based line number."""
    chunk_size: int = 1024
    """Rows embedded and written per chunk (what an interruption can lose at most)."""
    dimensions: int | None = None
    """Matryoshka: keep the first N dimensions (then renormalize)."""
    truncate: bool = False
    """Cut inputs longer than the model's limit instead of failing."""
    instruction: str | None = None
    """Task description put before every text with the instruction template (decoder embedders)."""


def read_rows(path: Path, text_field: str, id_field: str) -> list[tuple[Any, str]]:
    """(id, text) of every input row; ValueError naming the line of any bad row or repeated id."""
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist")
    rows: list[tuple[Any, str]] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for number, row in jsonl_values(f, path):
            row_id, text = _parse_row(row, number, text_field, id_field, path)
            key = json.dumps(row_id)
            if key in seen:
                raise ValueError(f"{path}:{number}: id {row_id!r} appears twice; ids must be unique to resume")
            seen.add(key)
            rows.append((row_id, text))
    return rows


def _parse_row(row: Any, number: int, text_field: str, id_field: str, path: Path) -> tuple[Any, str]:
    """(id, text) of one parsed line; the id defaults to the line's index from 0."""
    if isinstance(row, str):
        return number - 1, row
    if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
        raise ValueError(f"{path}:{number}: expected a JSON string or an object with a string field {text_field!r}")
    return row.get(id_field, number - 1), row[text_field]


def recover_output(path: Path) -> set[str]:
    """Ids (as JSON) already written; a torn last line from an interrupted write is cut off first."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn row
    done: set[str] = set()
    for line in data[:keep].splitlines():
        try:
            done.add(json.dumps(json.loads(line)["id"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path} holds a line that is not an embedding row; refusing to resume into it") from None
    if keep < len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
    return done


def append_chunk(path: Path, rows: list[dict]) -> None:
    """One write, then fsync: the chunk is on disk whole before the next one starts."""
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    with path.open("ab") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run_job(embedder, job: JobConfig, on_start: Callable[[int, int], None], on_progress: Callable[[int], None]) -> int:
    """Embed every input row not yet in the output; returns how many rows were written.

    on_start(num_todo, num_done) is called once, on_progress(n) after every n inputs embedded."""
    if job.chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {job.chunk_size}")
    out = Path(job.output)
    rows = read_rows(Path(job.input), job.text_field, job.id_field)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = recover_output(out)
    todo = [r for r in rows if json.dumps(r[0]) not in done]
    on_start(len(todo), len(rows) - len(todo))
    for chunk in chunks(todo, job.chunk_size):
        result = embedder.encode(
            [text for _, text in chunk], dimensions=job.dimensions, instruction=job.instruction,
            truncate_prompt_tokens=-1 if job.truncate else None, on_progress=on_progress,
        )
        append_chunk(out, [
            {"id": row_id, "embedding": vector, "num_tokens": n}
            for (row_id, _), vector, n in zip(chunk, result.embeddings.tolist(), result.num_tokens)
        ])
    return len(todo)
