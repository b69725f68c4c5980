"""`mopt embed --model DIR --input in.jsonl --output out.jsonl`: embed a JSONL file, resumably."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.runtime.config import field_docs

if TYPE_CHECKING:
    from model_optimizer.runtime.embed.jsonl_job import JobConfig

TRI_STATE = ("normalize", "append_eos")


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.runtime.embed.config import EmbedConfig
    from model_optimizer.runtime.embed.jsonl_job import JobConfig

    parser = subparsers.add_parser(
        "embed",
        help="embed a JSONL file of texts with an embedding model (resumable)",
        description="Embed every row of a JSONL file. Rows already in the output are skipped, so an "
        "interrupted run continues where it stopped.",
    )
    parser.add_argument(
        "--model", required=True, help="embedding model folder (sentence-transformers or transformers layout)"
    )
    add_dataclass_args(parser, JobConfig)
    add_dataclass_args(parser, EmbedConfig, skip=TRI_STATE)
    docs = field_docs(EmbedConfig)
    for name in TRI_STATE:  # bool | None: --x / --no-x, absent means "as the model folder says"
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=docs[name])
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.common.progress import batch_progress
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.embed.config import EmbedConfig
    from model_optimizer.runtime.embed.jsonl_job import EmbedJob, JobConfig, check_paths, output_lock

    job = dataclass_from_args(JobConfig, args)
    check_not_streams(job)
    check_paths(job)  # before the model loads
    console = Console(stderr=True)
    config = dataclass_from_args(EmbedConfig, args)
    work: EmbedJob | None = None
    try:
        # held from before the model loads to the last row: a second run on this output is refused at once
        with output_lock(Path(job.output)):
            embedder = Embedder(args.model, **vars(config))
            work = EmbedJob(
                embedder,
                job,
                on_warning=lambda text: console.print(f"warning: {text}", highlight=False, soft_wrap=True),
            )
            num_todo, num_done = work.prepare()
            if num_done:
                console.print(f"resuming: {num_done} rows already in {job.output}", highlight=False, soft_wrap=True)
            # a bar on a terminal; in a log or pipe a line at every tenth of the rows
            with batch_progress(console, num_todo, "embed", _log, unit="rows") as advance:
                written = work.run(advance)
    except KeyboardInterrupt:  # every finished row is already in the file: say so, no traceback
        num_written = work.num_written if work is not None else 0
        print(
            f"mopt embed: interrupted; {num_written} new rows are in {job.output}, "
            "run the same command again to continue after them",
            file=sys.stderr,
        )
        return 130
    console.print(f"wrote {written} rows to {job.output}", highlight=False, soft_wrap=True)
    return 0


def check_not_streams(job: JobConfig) -> None:
    """Refuse, by name, an --input or --output that is a pipe, FIFO or device (/dev/stdin, /dev/stdout,
    `<(...)`, `-` for stdin). The input is checked as a file and the output is appended to and read back
    to resume: a stream output waited forever on that read (with a lock file made beside it, in /dev for
    /dev/stdout), and a piped input was said not to exist."""
    if job.input == "-":
        raise ValueError("--input - (stdin) is not supported: give a JSONL file (./- for a file named '-')")
    for flag, path in (("--input", job.input), ("--output", job.output)):
        if path and os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
            raise ValueError(
                f"{flag} {path} is a pipe or device, not a file: mopt embed reads its input as a file and "
                "appends to its output, reading it back to resume; give file paths"
            )


def _log(message: str) -> None:
    print(f"mopt embed: {message}", file=sys.stderr, flush=True)
