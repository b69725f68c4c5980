"""`mopt inspect`: read a checkpoint without loading it, list what will break, clean it, plan its memory.

    mopt inspect ./my-checkpoint                     # census, findings with fixes (rich tables)
    mopt inspect ./my-checkpoint --json              # the same as one JSON document
    mopt inspect ./my-checkpoint --max-model-len 32768
    mopt inspect ./my-checkpoint --fix ./clean --dtype bfloat16 --chat-template chatml
    mopt inspect ./my-checkpoint --gpu H200 --gpu-memory-utilization 0.9 --seq-len 8192
    mopt inspect ./llama-70b --gpu H200 --tensor-parallel-size 2   # the plan per GPU of 2

Only config files, tokenizer files and the safetensors headers are read, never the tensor data.
--fix writes a cleaned copy (the input is never touched) and inspects it; the exit code is then
the cleaned folder's.
Exit codes: 0 loads (perhaps with warnings), 1 an error-severity finding, 2 bad arguments."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from model_optimizer.cli.args import token_count
from model_optimizer.runtime.config import EngineConfig, field_docs
from model_optimizer.runtime.units import TOKEN_COUNTS


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "inspect",
        help="read a checkpoint without loading it: census, problems and their fixes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "folder", help="checkpoint folder (config.json, *.safetensors, tokenizer files) or Hugging Face Hub id"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument(
        "--max-model-len",
        type=token_count,
        default=None,
        help="the context you mean to serve, checked against the model (32k = 32,000, 32K = 32,768, as vLLM reads them)",
    )
    plan = parser.add_argument_group("memory plan (the engine's KV-cache sizing rules)")
    plan.add_argument(
        "--gpu",
        metavar="NAME|live",
        default=None,
        help="plan for this GPU: a datasheet name (H200, A100 80GB, L4, ...) or 'live' for the one here",
    )
    plan.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="sequence length for 'how many sequences fit' (default: max model len)",
    )
    for name in (
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "tensor_parallel_size",
    ):
        field_help = field_docs(EngineConfig)[name]  # the dtype is config.json's, as `mopt serve --dtype auto` runs it
        plan.add_argument(
            "--" + name.replace("_", "-"),
            type=float if name == "gpu_memory_utilization" else token_count if name in TOKEN_COUNTS else int,
            default=getattr(EngineConfig, name),
            help=f"{field_help} (default: {getattr(EngineConfig, name)})",
        )
    plan.add_argument(
        "--enable-expert-parallel", action="store_true", help=field_docs(EngineConfig)["enable_expert_parallel"]
    )
    fix = parser.add_argument_group("--fix: write a cleaned copy")
    fix.add_argument("--fix", metavar="OUT", help="write a cleaned checkpoint to the new folder OUT, then inspect it")
    fix.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default=None,
        help="one dtype for every floating tensor (default: the dtype most linear weights have)",
    )
    fix.add_argument(
        "--chat-template",
        metavar="NAME|FILE",
        default=None,
        help="add a chat template: chatml (Qwen2/3), llama3, mistral, or a .jinja file",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.model.inspect.inspector import inspect_checkpoint
    from model_optimizer.model.inspect.report import print_report
    from model_optimizer.runtime.hub import resolve_model_dir

    if args.max_model_len is not None and args.max_model_len <= 0:
        raise ValueError(f"--max-model-len must be a positive integer, got {args.max_model_len}")
    args.folder = str(resolve_model_dir(args.folder))  # a Hub id: its snapshot, downloaded or from the cache
    if args.fix is not None:
        from model_optimizer.common.fileio import check_writable_folder_path

        check_writable_folder_path(os.path.expanduser(args.fix), "--fix")  # '' refused, not the current folder
    with Console(stderr=True).status("reading headers and checking keys against the engine's loader..."):
        report = inspect_checkpoint(args.folder, max_model_len=args.max_model_len)
        _attach_plan(args, report)
    doc = report.to_dict()
    if args.fix is None:
        if args.dtype or args.chat_template:
            raise ValueError("--dtype and --chat-template choose what --fix writes; add --fix OUT")
        print(json.dumps(doc, indent=1)) if args.json else print_report(Console(), doc)
        return report.exit_code
    return _fix(args, doc)


def _attach_plan(args: argparse.Namespace, report: Any) -> None:
    """The memory plan when the engine can build the model; a bad --gpu or setting is the user's error."""
    from model_optimizer.model.inspect.consumption import is_encoder_config
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_gpu import gpu_memory

    engine = EngineConfig(
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        tensor_parallel_size=args.tensor_parallel_size,
        enable_expert_parallel=args.enable_expert_parallel,
    )
    if args.gpu is not None and not args.gpu.strip():
        raise ValueError("--gpu is empty: give a GPU name (H200, A100 80GB, L4, ...) or 'live'")
    gpu = gpu_memory(args.gpu) if args.gpu else None
    if report.raw_check.error is not None or any(f.id == "context.too_long" for f in report.findings):
        return  # the findings say why the engine would not start; no plan to make
    if is_encoder_config(report.checkpoint.config):
        return  # the plan is the generation engine's (weights, KV cache, activations); an encoder has no KV cache
    report.memory_plan = plan_memory(report.checkpoint.config, gpu, engine, args.seq_len)


def _fix(args: argparse.Namespace, before: dict[str, Any]) -> int:
    from dataclasses import asdict

    from rich.console import Console

    from model_optimizer.model.inspect.fix import FixOptions, fix_checkpoint
    from model_optimizer.model.inspect.inspector import inspect_checkpoint
    from model_optimizer.model.inspect.report import print_report

    console = Console()
    with Console(stderr=True).status(f"writing the cleaned checkpoint to {args.fix}..."):
        result = fix_checkpoint(args.folder, args.fix, FixOptions(dtype=args.dtype, chat_template=args.chat_template))
    after = inspect_checkpoint(result.out, max_model_len=args.max_model_len)
    fixed = {k: str(v) if k == "out" else v for k, v in asdict(result).items()}
    if args.json:
        print(json.dumps({"input": before, "fix": fixed, "output": after.to_dict()}, indent=1))
        return after.exit_code
    print_report(console, before)
    console.print(
        f"\n[bold]wrote {result.out}[/]: {result.num_tensors} tensors in {result.dtype}, dropped {len(result.dropped)}, "
        f"merged LoRA into {len(result.merged_lora)}",
        highlight=False,
    )
    for note in result.notes:
        console.print(f"  - {note}", highlight=False)
    console.print("\n[bold]the cleaned checkpoint:[/]")
    print_report(console, after.to_dict())
    return after.exit_code
