"""`mopt inspect`: read a checkpoint without loading it, list what will break, clean it, plan its memory.

    mopt inspect ./my-checkpoint                     # census, findings with fixes (rich tables)
    mopt inspect ./my-checkpoint --json              # the same as one JSON document
    mopt inspect ./my-checkpoint --max-model-len 32768

Only config files, tokenizer files and the safetensors headers are read, never the tensor data.
Exit codes: 0 loads (perhaps with warnings), 1 an error-severity finding, 2 bad arguments."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("inspect", help="read a checkpoint without loading it: census, problems and their fixes",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="checkpoint folder (config.json, *.safetensors, tokenizer files)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--max-model-len", type=int, default=None, help="the context you mean to serve, checked against the model")
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.modelio.inspector import inspect_checkpoint
    from model_optimizer.modelio.report import print_report

    if args.max_model_len is not None and args.max_model_len <= 0:
        raise ValueError(f"--max-model-len must be a positive integer, got {args.max_model_len}")
    with Console(stderr=True).status("reading headers and checking keys against the engine's loader..."):
        report = inspect_checkpoint(args.folder, max_model_len=args.max_model_len)
    doc = report.to_dict()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_report(Console(), doc)
    return report.exit_code
