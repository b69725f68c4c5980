"""`mopt export-onnx --model DIR --output OUT_DIR`: an embedding model as ONNX, checked with onnxruntime."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from model_optimizer.model.export.onnx import ExportReport

MIN_OPSET, MAX_OPSET = 14, 21
"""The exporter writes scaled_dot_product_attention from opset 14 on; below it, it fails mid-export."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "export-onnx",
        help="export an embedding model to ONNX (dynamic batch and sequence) and check it against the engine",
        description="Write OUT_DIR/model.onnx (input_ids, attention_mask -> sentence_embedding, pooled and "
        "normalized), the tokenizer files and export_report.json with the max abs difference and cosine "
        "between onnxruntime and the engine.",
    )
    parser.add_argument(
        "--model", required=True, help="embedding model folder (BertModel-family encoder or decoder embedder)"
    )
    parser.add_argument("--output", required=True, help="folder to write model.onnx, tokenizer and report into")
    parser.add_argument(
        "--opset", type=int, default=17, help=f"ONNX opset version, {MIN_OPSET} to {MAX_OPSET} (default: 17)"
    )
    parser.add_argument(
        "--pooling",
        choices=["auto", "mean", "cls", "last", "max", "mean_sqrt_len"],
        default="auto",
        help="pooling baked into the graph; auto reads the model folder (default: auto)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalize in the graph; empty: as the model folder says",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.cli._interrupts import Terminated, report_stop
    from model_optimizer.common.processes import sigterm_raises

    if not MIN_OPSET <= args.opset <= MAX_OPSET:
        raise ValueError(
            f"--opset must be between {MIN_OPSET} and {MAX_OPSET} (attention needs {MIN_OPSET}), got {args.opset}"
        )
    check_onnx_packages()
    out_dir = check_output_folder(args.output)
    model = check_model_folder(args.model, out_dir)
    console = Console()
    started = int(time.time())  # whole seconds: some file systems keep mtimes no finer
    try:
        with sigterm_raises(Terminated):  # the staging folder is removed on the way out, as on Ctrl-C
            report = _export(model, out_dir, args, console)
    except KeyboardInterrupt as exc:
        written = out_dir / "export_report.json"  # moved in last: came the signal as the files moved, all are in
        if written.is_file() and written.stat().st_mtime >= started:
            return report_stop("export-onnx", exc, f"{out_dir} had been written in full before that")
        return report_stop("export-onnx", exc, f"no new file was written to {out_dir}")
    console.print(f"wrote {report.onnx_path}")
    console.print(
        f"onnxruntime vs engine on {report.num_texts} texts: max abs diff {report.max_abs_diff:.3g}, "
        f"min cosine {report.min_cosine:.6f}"
    )
    return 0


def _export(model: str, out_dir: Path, args: argparse.Namespace, console: Console) -> ExportReport:
    """Load the model, export it into `out_dir` and check the graph (model.export.onnx.export_folder). What
    it is doing shows as a spinner on a terminal, and as one line in a log or pipe, where a spinner
    draws nothing: without it a large model's minutes of export would show no sign of life."""
    from model_optimizer.model.export.onnx import export_folder
    from model_optimizer.runtime.embed import Embedder

    embedder = Embedder(model, device="cpu", dtype="float32", pooling=args.pooling, normalize=args.normalize)
    doing = "exporting and checking with onnxruntime"
    if not console.is_terminal:
        print(f"mopt export-onnx: {doing}", file=sys.stderr, flush=True)
        return export_folder(embedder, out_dir, args.opset)
    with console.status(doing):
        return export_folder(embedder, out_dir, args.opset)


ONNX_PACKAGES = ("onnx", "onnxruntime")
"""torch.onnx.export writes the graph through onnx; the check runs it in onnxruntime. Neither is a dependency
of mopt (the [onnx] extra installs both)."""


def check_onnx_packages() -> None:
    """ValueError naming the install line when onnx or onnxruntime cannot be imported: found before the
    model loads, not as a traceback after the whole export."""
    missing = []
    for name in ONNX_PACKAGES:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ValueError(
            f"export-onnx needs {' and '.join(missing)}, not installed here: pip install {' '.join(ONNX_PACKAGES)} "
            "(or pip install 'model-optimizer[onnx]')"
        )


def check_output_folder(output: str) -> Path:
    """--output as a folder we can write in, checked before the model loads: not empty (Path("") is the
    current folder, whose model.onnx and tokenizer files the export would overwrite), not a file or
    inside one, and on a file system that takes new entries (else the export fails at its very end)."""
    from model_optimizer.common.fileio import check_writable_folder_path

    check_writable_folder_path(output, "--output")  # the string: "" is refused there, not read as "."
    return Path(output)


def check_model_folder(model: str, out_dir: Path) -> str:
    """The model folder (a Hub id resolved), checked before it loads: it has tokenizer files (without them
    transformers makes up an empty tokenizer, which would be exported beside the graph and pass the
    check), and it is not --output (saving its tokenizer onto itself fails after model.onnx is written)."""
    from model_optimizer.runtime.hub import resolve_model_dir
    from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES, has_tokenizer_files

    folder = resolve_model_dir(model)
    if not has_tokenizer_files(folder):
        raise ValueError(
            f"{folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); export-onnx writes the "
            "tokenizer beside model.onnx: copy the original model's tokenizer files into the folder"
        )
    if out_dir.exists() and out_dir.resolve() == folder.resolve():
        raise ValueError(f"--output {out_dir} is the model folder; give a new folder for model.onnx and its tokenizer")
    return str(folder)
