"""`mopt export-onnx --model DIR --output OUT_DIR`: an embedding model as ONNX, checked with onnxruntime."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version (default: 17)")
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

    from model_optimizer.model.export.onnx import export_folder
    from model_optimizer.runtime.embed import Embedder

    if not 11 <= args.opset <= 21:
        raise ValueError(f"--opset must be between 11 and 21, got {args.opset}")
    out_dir = Path(args.output)
    check_output_folder(out_dir)
    console = Console()
    embedder = Embedder(args.model, device="cpu", dtype="float32", pooling=args.pooling, normalize=args.normalize)
    with console.status("exporting and checking with onnxruntime"):
        report = export_folder(embedder, out_dir, args.opset)
    console.print(f"wrote {report.onnx_path}")
    console.print(
        f"onnxruntime vs engine on {report.num_texts} texts: max abs diff {report.max_abs_diff:.3g}, "
        f"min cosine {report.min_cosine:.6f}"
    )
    return 0


def check_output_folder(out_dir: Path) -> None:
    """ValueError before the model loads when --output cannot become a folder (it or a parent is a file)."""
    for path in (out_dir, *out_dir.parents):
        if path.exists():
            if not path.is_dir():
                what = "is a file" if path == out_dir else f"is inside {path}, which is a file"
                raise ValueError(
                    f"--output {out_dir} {what}; export-onnx writes a folder (model.onnx, the tokenizer "
                    "files, export_report.json): give a new or existing folder"
                )
            return
