"""`mopt bench`: load-test an OpenAI-compatible server; `mopt bench compare a.json b.json`."""

from __future__ import annotations

import argparse

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.bench.client import ClientConfig
    from model_optimizer.bench.load import LoadConfig
    from model_optimizer.bench.runner import OutputConfig
    from model_optimizer.bench.workloads import WorkloadConfig

    parser = subparsers.add_parser(
        "bench",
        help="measure an OpenAI-compatible server (TTFT, TPOT, ITL, throughput, goodput)",
        description="Measure an OpenAI-compatible server the way its users experience it. "
        "`mopt bench compare A.json B.json` shows two runs side by side.",
    )
    for cls in (ClientConfig, WorkloadConfig, LoadConfig, OutputConfig):
        add_dataclass_args(parser, cls)
    actions = parser.add_subparsers(dest="bench_action", metavar="{compare}")
    compare = actions.add_parser("compare", help="print two run JSON files side by side with ratios")
    compare.add_argument("run_a", help="run JSON of the baseline (A)")
    compare.add_argument("run_b", help="run JSON to compare against it (B)")
    return parser


def run(args: argparse.Namespace) -> int:
    import os

    from rich.console import Console

    from model_optimizer.bench.client import ClientConfig
    from model_optimizer.bench.load import LoadConfig
    from model_optimizer.bench.runner import BenchSetup, OutputConfig, run_benchmark
    from model_optimizer.bench.workloads import WorkloadConfig

    console = Console()
    if getattr(args, "bench_action", None) == "compare":
        from model_optimizer.bench.compare import print_comparison

        print_comparison(args.run_a, args.run_b, console)
        return 0
    client = dataclass_from_args(ClientConfig, args)
    if client.api_key is None and os.environ.get("OPENAI_API_KEY"):
        client.api_key = os.environ["OPENAI_API_KEY"]
    setup = BenchSetup(
        client=client,
        workload=dataclass_from_args(WorkloadConfig, args),
        load=dataclass_from_args(LoadConfig, args),
        output=dataclass_from_args(OutputConfig, args),
    )
    try:
        results = run_benchmark(setup, console)
    except KeyboardInterrupt:
        console.print(f"interrupted: runs that finished are saved in {setup.output.output_dir}")
        return 130
    console.print(f"report: {os.path.join(setup.output.output_dir, 'report.html')}")
    return 0 if all(r["summary"]["num_ok"] for r in results) else 1
