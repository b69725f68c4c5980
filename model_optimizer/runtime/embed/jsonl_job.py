"""A resumable JSONL embedding job: the work behind `mopt embed`.

Input: one row per line, a JSON object with a text field (default "text") and an optional id field
(default "id"; the 0-based line number when absent), or a bare JSON string.
Output: one JSON object per line, {"id", "embedding", "num_tokens"}, in the order the rows finish
(batches go longest text first), so join on "id". Beside it, `<output>.meta.json` records the model
and the settings that shape the vectors (see output_meta.py); a resume with others is refused.

Crash safety: each batch's rows are appended with one write and flushed to the operating system as
soon as the batch has run, so Ctrl-C, a kill or a crash of the process loses no finished row; the
file is fsynced after every chunk (what a power loss can cost at most: fsync per batch would cost
milliseconds per batch on small models). A write cut off by Ctrl-C is cut back to the last whole row
at once; one cut off by a kill leaves a torn last line, which the next run cuts back before it
resumes after the last complete row, skipping every id the output already holds. (Rewriting the
whole file per batch through a temp file would make a large job quadratic in its output size.)

One run at a time per output: two appending to one file would both embed the rows missing when they
started and write them twice, so a run holds `<output>.lock` (flock) and a second one is refused.
A run that fails before writing a row removes the output and sidecar it created, so no empty file
and no sidecar of refused settings is left to mislead the next run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_optimizer.common.fileio import check_writable_file_path, jsonl_values, run_lock, text_lines
from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.config import check_positive
from model_optimizer.runtime.embed.inputs import BLANK_HINT, InputError, is_blank
from model_optimizer.runtime.embed.output_meta import (
    adopt_truncation,
    check_same,
    describe,
    meta_path,
    read_meta,
    write_meta,
)


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
    """Rows per embedding call; rows are written as each batch finishes and the file is fsynced per chunk."""
    dimensions: int | None = None
    """Matryoshka: keep the first N dimensions (then renormalize)."""
    truncate: bool = False
    """Cut inputs longer than the model's limit instead of failing."""
    instruction: str | None = None
    """Task description put before every text with the instruction template (decoder embedders)."""

    def __post_init__(self) -> None:
        check_positive(self, "chunk_size")  # checked here, before the model loads
        if self.dimensions is not None:
            check_positive(self, "dimensions")


def check_paths(job: JobConfig) -> None:
    """The input is a file and the output can be one: cheap checks, made before the model loads."""
    if not job.input or not job.output:
        raise ValueError("both --input and --output are required")
    if job.output == "-":  # the output is appended to and read back to resume, which stdout cannot be
        raise ValueError(
            "--output - (stdout) is not supported: embed writes a file it can resume; give a file path "
            "(./- for a file named '-')"
        )
    source = Path(job.input)
    if source.is_dir():
        raise ValueError(f"--input {source} is a folder, not a JSONL file")
    if not source.is_file():
        raise FileNotFoundError(f"input file {source} does not exist")
    check_writable_file_path(Path(job.output), "--output")


def lock_path(output: Path) -> Path:
    return output.with_name(output.name + ".lock")


def output_lock(output: Path) -> AbstractContextManager[None]:
    """Hold `<output>.lock` for the run (common.fileio.run_lock)."""
    return run_lock(lock_path(output), output, "mopt embed")


def read_rows(path: Path, text_field: str, id_field: str) -> list[tuple[Any, str]]:
    """(id, text) of every input row; ValueError naming the line of any bad row or repeated id."""
    rows: list[tuple[Any, str]] = []
    seen: set[str] = set()
    for number, row in jsonl_values(text_lines(path), path):
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
        row_id, text = number - 1, row
    elif isinstance(row, dict) and isinstance(row.get(text_field), str):
        row_id, text = row.get(id_field, number - 1), row[text_field]
    else:
        raise ValueError(f"{path}:{number}: expected a JSON string or an object with a string field {text_field!r}")
    try:  # NaN or Infinity (Python's json reads them) would make every output row with it invalid JSON
        json.dumps(row_id, allow_nan=False)
    except ValueError:
        raise ValueError(
            f"{path}:{number}: the id holds NaN or Infinity, which JSON cannot carry; give another id"
        ) from None
    if is_blank(text):  # as the server refuses it: a vector of the special tokens alone stands for no text
        raise ValueError(f"{path}:{number}: the text is {BLANK_HINT}; give every row visible text")
    for what, value in (("text", text), ("id", json.dumps(row_id, ensure_ascii=False))):
        at = not_utf8_at(value)
        if at is not None:
            raise ValueError(
                f"{path}:{number}: the {what} is not valid Unicode (a lone surrogate such as \\ud800 at character {at})"
            )
    return row_id, text


@dataclass
class OutputState:
    """What the output file already holds."""

    done: set[str]
    """Ids (as JSON) of the complete rows."""
    lengths: set[int]
    """Vector lengths seen in those rows."""
    longest: int | None = 0
    """The most tokens a row's text made (its num_tokens); None when a row does not say."""


def recover_output(path: Path) -> OutputState:
    """What `path` holds; a torn last line from an interrupted write is cut off first."""
    state = OutputState(set(), set())
    if not path.exists():
        return state
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn row
    for number, line in enumerate(data[:keep].splitlines(), start=1):
        try:
            row = json.loads(line)
            state.done.add(json.dumps(row["id"]))
            state.lengths.add(len(row["embedding"]))
            num_tokens = row.get("num_tokens")
            if state.longest is None or not isinstance(num_tokens, int):
                state.longest = None
            else:
                state.longest = max(state.longest, num_tokens)
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path}:{number} is not an embedding row; refusing to resume into it") from None
    if keep < len(data):
        with path.open("r+b") as f:
            f.truncate(keep)
    return state


class RowWriter:
    """Appends rows to the output, one write per batch; a write cut off by an exception is taken back,
    so the file always ends with a whole row."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("ab", buffering=0)
        self._end = self._file.seek(0, os.SEEK_END)  # the end of the last whole row
        self.num_written = 0

    def write(self, rows: list[dict]) -> None:
        payload = memoryview("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
        try:
            sent = 0
            while sent < len(payload):
                sent += self._file.write(payload[sent:])
        except BaseException:
            os.ftruncate(self._file.fileno(), self._end)
            raise
        self._end += len(payload)
        self.num_written += len(rows)

    def sync(self) -> None:
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class EmbedJob:
    """One `mopt embed` run over `job.input` into `job.output`: `prepare()` reads the input, checks the output
    and says how much is left; `run()` embeds it. `num_written` counts this run's rows, also after an
    interruption."""

    def __init__(self, embedder, job: JobConfig, on_warning: Callable[[str], None] = lambda _: None) -> None:
        self.embedder, self.job, self.on_warning = embedder, job, on_warning
        self.num_written = 0
        self._todo: list[tuple[Any, str]] | None = None
        self._created: list[Path] = []
        """The output and sidecar this run created: removed again if it fails before writing a row."""

    def prepare(self) -> tuple[int, int]:
        """(rows to embed, rows already in the output); ValueError when the output is not this run's to extend."""
        job, out = self.job, Path(self.job.output)
        check_paths(job)
        hidden = self.embedder.hidden_size
        if job.dimensions is not None and job.dimensions > hidden:  # before any file is made
            raise ValueError(f"--dimensions {job.dimensions} is more than the model's {hidden}; give 1 to {hidden}")
        self.embedder.check_dimensions(job.dimensions)  # a model not trained to be cut short: refused alike
        rows = read_rows(Path(job.input), job.text_field, job.id_field)
        out.parent.mkdir(parents=True, exist_ok=True)
        self._created = [p for p in (out, meta_path(out)) if not p.exists()]
        state = recover_output(out)
        self._check_or_start(out, state)
        self._todo = [r for r in rows if json.dumps(r[0]) not in state.done]
        return len(self._todo), len(rows) - len(self._todo)

    def run(self, on_progress: Callable[[int], None] = lambda n: None) -> int:
        """Embed every input row not yet in the output (preparing first if `prepare` was not called);
        returns how many rows were written. on_progress(n) after every n inputs embedded."""
        if self._todo is None:
            self.prepare()
        writer = RowWriter(Path(self.job.output))
        try:
            for chunk in chunks(self._todo or [], self.job.chunk_size):
                self._embed_chunk(chunk, writer, on_progress)
                writer.sync()
        except BaseException:
            if writer.num_written == 0:  # nothing to resume from: leave no empty file or sidecar behind
                for path in self._created:
                    path.unlink(missing_ok=True)
            raise
        finally:
            self.num_written = writer.num_written
            writer.close()
        return self.num_written

    def _embed_chunk(self, chunk: list[tuple[Any, str]], writer: RowWriter, on_progress: Callable[[int], None]) -> None:
        def save(positions: list[int], vectors, num_tokens: list[int]) -> None:
            writer.write(
                [
                    {"id": chunk[i][0], "embedding": v, "num_tokens": n}
                    for i, v, n in zip(positions, vectors.tolist(), num_tokens)
                ]
            )
            self.num_written = writer.num_written

        try:
            self.embedder.encode(
                [text for _, text in chunk],
                dimensions=self.job.dimensions,
                instruction=self.job.instruction,
                truncate_prompt_tokens=-1 if self.job.truncate else None,
                on_progress=on_progress,
                on_batch=save,
            )
        except InputError as exc:  # "input 3" counts within this chunk: name the row by its id instead
            if not 0 <= exc.index < len(chunk):
                raise
            raise ValueError(f"{self.job.input}: the row with id {chunk[exc.index][0]!r}{exc.detail}") from None

    def _check_or_start(self, out: Path, state: OutputState) -> None:
        """Refuse to append vectors unlike those in `out`; record this run's settings for a file it starts."""
        current = describe(self.embedder, self.job.dimensions, self.job.instruction, self.job.truncate)
        stored = read_meta(out) if state.done else None
        if stored is not None:
            adopted = adopt_truncation(stored, current, state.longest)
            check_same(out, adopted, current)
            if adopted is not stored:  # from now on rows may be cut: the sidecar says so
                write_meta(out, current)
        length = current["settings"]["dimensions"]
        if state.lengths - {length}:
            raise ValueError(
                f"{out} holds vectors of length {sorted(state.lengths)}, this run makes {length}: "
                "appending would mix incomparable vectors; write to another --output"
            )
        if stored is not None:
            return
        if state.done:
            self.on_warning(
                f"{out} has no {meta_path(out).name} saying which model wrote it; only the vector "
                f"length ({length}) could be checked. Recording this run's settings."
            )
        write_meta(out, current)
