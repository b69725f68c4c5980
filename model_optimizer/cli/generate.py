"""`mopt generate`: offline generation from the command line, with a progress bar and engine statistics.

    mopt generate --prompt "def fibonacci(n):" --max-tokens 32
    mopt generate --model DIR --prompts-file in.jsonl --output out.jsonl
In the JSONL input each line is {"prompt": "..."} (or {"prompt_token_ids": [...]}), optionally with
sampling fields ("max_tokens", "temperature", ...) that override the flags for that line.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, fields
from pathlib import Path

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.config import EngineConfig
from model_optimizer.fileio import atomic_write, jsonl_values
from model_optimizer.sampling_params import SamplingParams

SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "seed", "n",
                  "repetition_penalty", "presence_penalty", "frequency_penalty", "ignore_eos", "logprobs")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("generate", help="generate text offline with the engine", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    parser.add_argument("--prompts-file", type=Path, help="JSONL file of prompts")
    parser.add_argument("--output", type=Path, help="write results as JSONL here (written atomically)")
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    add_dataclass_args(parser, SamplingParams, skip=tuple(f.name for f in fields(SamplingParams) if f.name not in SAMPLING_FLAGS))
    add_dataclass_args(parser, EngineConfig, skip=("seed",))  # --seed is the sampling seed here
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from model_optimizer.llm import LLM

    console = Console(stderr=True)
    rows = _read_prompts(args)
    base = dataclass_from_args(SamplingParams, args, stop=args.stop)
    params = [SamplingParams(**{**asdict(base), **{k: v for k, v in row.items() if k in SAMPLING_FLAGS or k == "stop"}}) for row in rows]
    prompts = [row.get("prompt_token_ids") or row["prompt"] for row in rows]
    with console.status("loading model"):
        llm = LLM(**asdict(dataclass_from_args(EngineConfig, args, seed=args.seed or 0)))
    start = time.perf_counter()
    with Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("generate", total=len(prompts))
        outputs = llm.generate(prompts, params, on_progress=lambda _: bar.advance(task))
    elapsed = time.perf_counter() - start
    results = [_result(o) for o in outputs]
    if args.output:
        atomic_write(args.output, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in results))
    else:
        for result in results:
            for completion in result["outputs"]:
                console.print(f"[bold]{result['prompt']!r}[/bold] -> {completion['text']!r} ({completion['finish_reason']})", soft_wrap=True)
    _print_stats(console, llm, outputs, elapsed)
    return 0


def _read_prompts(args: argparse.Namespace) -> list[dict]:
    rows = [{"prompt": p} for p in args.prompt]
    if args.prompts_file:
        for number, row in jsonl_values(args.prompts_file.read_text().splitlines(), args.prompts_file):
            if not isinstance(row, dict) or not ("prompt" in row or "prompt_token_ids" in row):
                raise ValueError(f"{args.prompts_file}:{number}: expected an object with 'prompt' or 'prompt_token_ids'")
            rows.append(row)
    if not rows:
        raise ValueError("no prompts: give --prompt TEXT or --prompts-file FILE")
    return rows


def _result(output) -> dict:
    return {
        "prompt": output.prompt,
        "prompt_token_ids": output.prompt_token_ids,
        "num_cached_tokens": output.num_cached_tokens,
        "outputs": [
            {"index": c.index, "text": c.text, "token_ids": c.token_ids, "finish_reason": c.finish_reason,
             "stop_reason": c.stop_reason}
            for c in output.outputs
        ],
        "ttft_s": output.metrics.ttft,
        "latency_s": (output.metrics.finished_time or 0) - output.metrics.arrival_time,
    }


def _print_stats(console, llm, outputs, elapsed: float) -> None:
    from rich.table import Table

    stats = llm.engine.stats()
    generated = sum(o.num_output_tokens for o in outputs)
    table = Table(title="engine statistics", show_header=False)
    table.add_row("requests", str(len(outputs)))
    table.add_row("prompt tokens computed", str(stats.num_prompt_tokens))
    table.add_row("generated tokens", str(generated))
    table.add_row("wall time", f"{elapsed:.2f} s")
    table.add_row("output tokens/s", f"{generated / elapsed:.1f}" if elapsed else "-")
    table.add_row("prefix-cache hit rate", f"{stats.prefix_cache_hit_rate:.1%}")
    table.add_row("preemptions", str(stats.num_preemptions))
    table.add_row("engine steps", str(stats.num_steps))
    table.add_row("KV-cache blocks", f"{stats.num_blocks} x {llm.config.block_size} tokens")
    console.print(table)
