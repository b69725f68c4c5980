"""`mopt quantize`: write a quantized copy of a model and prove what it cost in accuracy.

    mopt quantize MODEL --method awq --output DIR [--calib FILE.jsonl|txt]
    mopt quantize --eval-only DIR --reference ORIG

The output is a compressed-tensors folder (vLLM and transformers load it too) with
quantization_report.json: perplexity, top-1 agreement and KL against the original, measured with our
engine on held-out text. With --max-ppl-increase / --min-top1 a result that breaks a limit is
refused: exit code 3 and no folder. Built in a temporary folder and renamed when done, so an
interrupted run leaves nothing behind.

Embedding models (BERT-family encoders such as all-MiniLM-L6-v2; fp8, int8, rtn-int4) are gated on
their vectors instead: both folders embed held-out texts through our embedding engine and the mean
cosine per text must reach --min-cosine (default 0.99).

A flag that would not be used is refused, not ignored: the other kind of model's accuracy limit,
calibration flags without awq, --group-size without an int4 method, --reference without --eval-only.
One run at a time per --output (a lock file, .DIR.lock, beside it while it runs).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

METHODS = ("fp8", "int8", "int8-w8a8", "awq", "rtn-int4")
GATE_EXIT = 3


def _folder(text: str) -> Path:
    """An --output folder; empty is refused (Path("") is the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a folder")
    return Path(text)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "quantize",
        help=f"quantize a model ({', '.join(METHODS)}) and check its accuracy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", help="float checkpoint folder (default: the built-in reference model)")
    p.add_argument(
        "--method",
        choices=METHODS,
        help="fp8 / int8: per-channel weights (int8-w8a8: int8 activations per token too, "
        "llm-compressor's W8A8); awq / rtn-int4: int4 in groups",
    )
    p.add_argument("--output", type=_folder, help="folder to create (must not exist, or be empty)")
    p.add_argument("--calib", help='calibration text for awq: .txt or .jsonl with a "text" field (default: built-in)')
    # calibration, group and window defaults are None here and filled in by options(): a flag that does not
    # apply to the method or model is refused only when the user gave it
    p.add_argument("--num-calib-samples", type=int, help="awq: calibration windows (default 128)")
    p.add_argument("--calib-seq-len", type=int, help="awq: tokens per calibration window (default 512)")
    p.add_argument(
        "--eval-text", help="held-out evaluation text, .txt or .jsonl (default: built-in, unseen by calibration)"
    )
    p.add_argument(
        "--num-eval-samples",
        type=int,
        help="evaluation windows (default 32); for embedding models, evaluation texts (default 256)",
    )
    p.add_argument(
        "--eval-seq-len",
        type=int,
        help="tokens per evaluation window (default 512, or the model's limit if lower); embedding texts are "
        "cut to it or the model's limit",
    )
    p.add_argument(
        "--group-size",
        type=int,
        help="awq / rtn-int4: int4 group size along the input, a multiple of 8 that divides every layer's "
        "input size (default 128)",
    )
    p.add_argument("--max-ppl-increase", type=float, help="refuse the result if perplexity rises more (0.05 = 5%%)")
    p.add_argument("--min-top1", type=float, help="refuse the result if top-1 agreement is lower (0..1)")
    p.add_argument(
        "--min-cosine",
        type=float,
        help="embedding models: refuse the result if the mean cosine to the original vectors is lower "
        "(-1..1, default 0.99)",
    )
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where to calibrate and evaluate")
    p.add_argument(
        "--eval-dtype",
        choices=("auto", "bfloat16", "float16", "float32"),
        default="auto",
        help="dtype both models are evaluated in (auto: each checkpoint's)",
    )
    p.add_argument("--eval-only", type=Path, metavar="DIR", help="only evaluate this quantized folder (any tool's)")
    p.add_argument("--reference", type=Path, help="with --eval-only: the original float folder")
    p.add_argument(
        "--json", action="store_true", help="print the whole report as JSON on stdout instead of the verdict lines"
    )
    p.set_defaults(handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from model_optimizer.cli._interrupts import Terminated, report_stop
    from model_optimizer.common.processes import sigterm_raises
    from model_optimizer.model.quantize.job import REPORT_NAME, GateFailed
    from model_optimizer.model.quantize.pipeline import eval_only, quantize

    opts = options(args)
    with _progress() as progress:
        try:
            with sigterm_raises(Terminated):  # the staging folder is removed on the way out, as on Ctrl-C
                if args.eval_only is not None:
                    report = eval_only(args.eval_only, args.reference, opts, progress)
                else:
                    report = quantize(opts, progress)
        except KeyboardInterrupt as exc:
            if args.eval_only is not None:
                return report_stop("quantize", exc, f"the report in {args.eval_only} was left as it was")
            if (Path(args.output) / REPORT_NAME).is_file():  # it came as the folder was published: it is whole
                return report_stop("quantize", exc, f"{args.output} had been written in full before that")
            return report_stop("quantize", exc, f"nothing was written to {args.output}")
        except GateFailed as exc:
            _print_verdict(args, opts, exc.report, None)
            for failure in exc.failures:
                print(f"mopt quantize: refused: {failure}", file=sys.stderr)
            if args.eval_only is None:
                print("mopt quantize: no folder was written", file=sys.stderr)
            return GATE_EXIT
    _print_verdict(args, opts, report, args.output if args.eval_only is None else None)
    target = args.eval_only if args.eval_only is not None else args.output
    print(f"report: {Path(target) / 'quantization_report.json'}", file=sys.stderr)
    return 0


def _print_verdict(args: argparse.Namespace, opts, report: dict, folder: Path | None) -> None:
    """PASS / FAIL, the figures, the bytes saved and the next command (stdout); --json: the report."""
    from model_optimizer.model.quantize.verdict import folder_bytes, verdict_lines

    if args.json:
        print(json.dumps(report, indent=2))
        return
    print("\n".join(verdict_lines(report, folder_bytes(opts.model), folder)), flush=True)


CALIB_FLAGS = ("calib", "num_calib_samples", "calib_seq_len")
"""Flags of the AWQ calibration: refused with any other method (it uses no calibration data)."""
GENERATION_GATES = ("max_ppl_increase", "min_top1")
EMBEDDING_GATES = ("min_cosine",)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The flags among `names` that the user set (their parser default is None)."""
    return [_flag(n) for n in names if getattr(args, n) is not None]


def options(args: argparse.Namespace):
    from model_optimizer.common.fileio import check_writable_folder_path
    from model_optimizer.model.quantize.embed_pipeline import DEFAULT_NUM_TEXTS
    from model_optimizer.model.quantize.job import QuantizeOptions, folder_method
    from model_optimizer.runtime.hub import resolve_model_dir
    from model_optimizer.runtime.models.model_config import is_embedding_folder

    if args.eval_only is not None:  # it scores a folder that exists: what would make one is a mistake
        given = [
            flag
            for flag, value in (("MODEL", args.model), ("--method", args.method), ("--output", args.output))
            if value
        ] + _given(args, (*CALIB_FLAGS, "group_size"))
        if given:
            raise ValueError(
                f"--eval-only DIR cannot be combined with {', '.join(given)}: it scores an existing quantized "
                "folder against --reference ORIG (to quantize, leave out --eval-only)"
            )
    else:
        _check_method_flags(args)
    for name in ("max_ppl_increase", "min_top1", "min_cosine"):
        if getattr(args, name) is not None and math.isnan(getattr(args, name)):  # NaN would pass every comparison
            raise ValueError(f"--{name.replace('_', '-')} must be a number, got nan")
    for name in ("num_calib_samples", "calib_seq_len", "num_eval_samples", "eval_seq_len", "group_size"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.min_top1 is not None and not 0 <= args.min_top1 <= 1:
        raise ValueError(f"--min-top1 must be between 0 and 1, got {args.min_top1}")
    if args.min_cosine is not None and not -1 <= args.min_cosine <= 1:
        raise ValueError(f"--min-cosine must be between -1 and 1 (a cosine), got {args.min_cosine}")
    if args.eval_only is not None:
        if args.reference is None:
            raise ValueError("--eval-only DIR needs --reference ORIG, the float folder it was made from")
        if not args.eval_only.is_dir():
            raise FileNotFoundError(f"--eval-only folder {args.eval_only} does not exist")
        check_writable_folder_path(args.eval_only, "--eval-only")  # its report goes there
        model, output = resolve_model_dir(str(args.reference)), args.eval_only
        spec = _spec_of(args.eval_only)
        # the report says the folder's method and group size, not our defaults: its own report's method
        # where it has one of ours (AWQ is not told apart from rounding by a compressed-tensors layout)
        method, group_size = folder_method(args.eval_only, spec), spec.group_size
    else:
        if args.method is None or args.output is None:
            raise ValueError(f"mopt quantize needs --method ({', '.join(METHODS)}) and --output DIR")
        check_writable_folder_path(args.output, "--output")  # before minutes of calibration, not after
        model, method, output = resolve_model_dir(args.model), args.method, args.output
        group_size = args.group_size or QuantizeOptions.group_size
    embedding = is_embedding_folder(model)
    _check_gates(args, model, embedding)
    num_eval = args.num_eval_samples
    if num_eval is None:
        num_eval = DEFAULT_NUM_TEXTS if embedding else 32
    defaults = QuantizeOptions(model=model, method=method, output=output)
    eval_seq_len = args.eval_seq_len or defaults.eval_seq_len
    calib_seq_len = args.calib_seq_len or defaults.calib_seq_len
    if not embedding:  # embedding texts are cut to the model's limit; a decoder's window must fit it
        limit = _max_positions(model)
        eval_seq_len = _within_limit(args.eval_seq_len, eval_seq_len, limit, "--eval-seq-len", model)
        calib_seq_len = _within_limit(args.calib_seq_len, calib_seq_len, limit, "--calib-seq-len", model)
    return QuantizeOptions(
        model=model,
        method=method,
        output=output,
        calib=args.calib,
        num_calib_samples=args.num_calib_samples or defaults.num_calib_samples,
        calib_seq_len=calib_seq_len,
        eval_text=args.eval_text,
        num_eval_samples=num_eval,
        eval_seq_len=eval_seq_len,
        group_size=group_size,
        max_ppl_increase=args.max_ppl_increase,
        min_top1=args.min_top1,
        min_cosine=args.min_cosine,
        device=args.device,
        eval_dtype=args.eval_dtype,
    )


def _check_method_flags(args: argparse.Namespace) -> None:
    """Refuse the flags that the quantization asked for would silently ignore."""
    if args.reference is not None:
        raise ValueError(
            "--reference is the original folder of --eval-only DIR; when quantizing, MODEL is the original "
            "(leave out --reference, or add --eval-only DIR to score an existing folder)"
        )
    if args.method is None:
        return  # "needs --method" is said below
    if args.method != "awq":
        for flag in _given(args, CALIB_FLAGS):
            what = "calibration text" if flag == "--calib" else "a calibration setting"
            raise ValueError(f"{flag} is {what} for --method awq; --method {args.method} uses none")
    from model_optimizer.runtime.layers.quantization.spec import INT4_METHODS

    if args.method not in INT4_METHODS and args.group_size is not None:
        raise ValueError(
            f"--group-size is the int4 group size of --method {' and '.join(INT4_METHODS)}; "
            f"--method {args.method} has one scale per output channel"
        )


def _check_gates(args: argparse.Namespace, model: Path, embedding: bool) -> None:
    """A limit the model's gate does not measure would be dropped while the verdict says PASS: refused."""
    if embedding:
        for flag in _given(args, GENERATION_GATES):
            raise ValueError(
                f"{flag} gates generation models (perplexity, top-1 agreement); {model} is an embedding model, "
                "gated on the cosine to the original vectors: use --min-cosine"
            )
    else:
        for flag in _given(args, EMBEDDING_GATES):
            raise ValueError(
                f"{flag} gates embedding models (their vectors); {model} is a generation model, gated on "
                "--max-ppl-increase and --min-top1"
            )


def _max_positions(model: Path) -> int:
    from model_optimizer.runtime.models.model_config import DecoderArgs, read_config

    return DecoderArgs.from_dict(read_config(model), source=str(model / "config.json")).max_position_embeddings


def _within_limit(given: int | None, value: int, limit: int, flag: str, model: Path) -> int:
    """`value` when the model takes windows that long: a default is cut to the model's limit, a value the
    user gave is refused now, not after the rounding (when the engine that evaluates would refuse it)."""
    if value <= limit:
        return value
    if given is None:
        return limit
    raise ValueError(f"{flag} {given} exceeds the {limit} tokens {model} takes (max_position_embeddings)")


def _spec_of(folder: Path):
    from model_optimizer.runtime.models.loader import spec_for_folder

    spec = spec_for_folder(folder, None)
    if spec is None:
        raise ValueError(f"{folder} has no quantization_config in config.json: it is not a quantized folder")
    return spec


class _progress:
    """Progress on stderr, one task per phase (AWQ layers, rounding, evaluation windows): a rich bar on a
    terminal; elsewhere (a log, CI, a pipe) plain lines as the work goes, since a bar there would
    only appear all at once at the end."""

    def __enter__(self):
        from model_optimizer.model.quantize.job import Progress as Callbacks

        if not sys.stderr.isatty():
            self.lines = _ProgressLines()
            return Callbacks(start=self.lines.start, advance=self.lines.advance, warn=_print_warning)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.bar.start()
        self.tasks: dict[str, int] = {}
        return Callbacks(start=self._start, advance=self._advance, warn=self._warn)

    def _start(self, name: str, total: int) -> None:
        self.tasks[name] = self.bar.add_task(name, total=total)

    def _advance(self, name: str) -> None:
        self.bar.advance(self.tasks[name])

    def _warn(self, text: str) -> None:
        self.bar.console.print(_warning_line(text), markup=False, highlight=False, soft_wrap=True)  # above the bar

    def __exit__(self, *exc) -> None:
        if hasattr(self, "bar"):
            self.bar.stop()


def _warning_line(text: str) -> str:
    return f"mopt quantize: warning: {text}"


def _print_warning(text: str) -> None:
    print(_warning_line(text), file=sys.stderr, flush=True)


class _ProgressLines:
    """`mopt quantize: AWQ search 3/8 (41 s)` on stderr: every unit of a phase of at most
    EVERY_UNIT_UP_TO units (AWQ layers), else each tenth."""

    EVERY_UNIT_UP_TO = 16

    def __init__(self) -> None:
        import time

        self.clock = time.monotonic
        self.phases: dict[str, list] = {}

    def start(self, name: str, total: int) -> None:
        self.phases[name] = [0, total, self.clock()]
        print(f"mopt quantize: {name}: {total} steps", file=sys.stderr, flush=True)

    def advance(self, name: str) -> None:
        phase = self.phases[name]
        phase[0] += 1
        done, total, started = phase
        tenth = max(1, total // 10)
        if total <= self.EVERY_UNIT_UP_TO or done % tenth == 0 or done == total:
            print(f"mopt quantize: {name} {done}/{total} ({self.clock() - started:.0f} s)", file=sys.stderr, flush=True)
