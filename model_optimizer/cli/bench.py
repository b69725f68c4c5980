"""`mopt bench`: load-test an OpenAI-compatible server; `mopt bench compare A B` compares two runs.

`compare` is read as a plain positional word, not an argparse sub-command: with a sub-command,
any flag argparse does not know (a typo, a vLLM name) let its value be read as the sub-command
("invalid choice: '10' (choose from 'compare')"). Now an unknown flag is reported by name.
"""

from __future__ import annotations

import argparse
import dataclasses

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args, field_docs

VLLM_ALIASES = {
    # vLLM's `vllm bench serve` flag -> ours (same meaning)
    "--num-prompts": "num_requests",
    "--dataset-name": "dataset",
    "--random-input-len": "prompt_len",
    "--random-output-len": "output_len",
    "--result-dir": "output_dir",
}
VLLM_DATASETS = {"random": "synthetic"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.runner import OutputConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig

    parser = subparsers.add_parser(
        "bench",
        help="measure an OpenAI-compatible server (TTFT, TPOT, ITL, throughput, goodput)",
        description="Measure an OpenAI-compatible server the way its users experience it. "
        "`mopt bench compare A B` shows two runs side by side (run JSON files, or folders of runs).",
    )
    parser.add_argument(
        "compare_args",
        nargs="*",
        metavar="compare A B",
        help="`compare A B`: print run A (a run-NN-*.json file or a folder of runs) and run B "
        "side by side with B/A ratios",
    )
    for cls in (ClientConfig, WorkloadConfig, LoadConfig, OutputConfig):
        add_dataclass_args(parser, cls, skip=("header",))
    parser.add_argument(
        "--header",
        action="append",
        metavar="KEY=VALUE",
        default=None,
        help=field_docs(ClientConfig)["header"] + " (saved in the run's config, credential-like values masked)",
    )
    actions = {a.dest: a for a in parser._actions}
    actions["dataset"].type = _dataset_name
    actions["endpoint"].type = _endpoint_name
    vllm = parser.add_argument_group("vLLM's names (`vllm bench serve`), accepted with the same meaning")
    for flag, dest in VLLM_ALIASES.items():
        target = actions[dest]
        vllm.add_argument(
            flag,
            dest=dest,
            type=target.type,
            choices=target.choices,
            default=None,
            help=f"same as {target.option_strings[0]}" + (" (vLLM's random is synthetic)" if dest == "dataset" else ""),
        )
    vllm.add_argument(
        "--save-result",
        action="store_true",
        default=None,
        help="accepted for vLLM compatibility: every run is always saved to --output-dir",
    )
    return parser


def _dataset_name(value: str) -> str:
    """Our dataset names plus vLLM's `random` (our synthetic)."""
    return VLLM_DATASETS.get(value, value)


def _endpoint_name(value: str) -> str:
    """Our endpoint names plus vLLM's endpoint paths (/v1/completions, ...): the client's PATHS read backwards."""
    from model_optimizer.optimizer.bench.client import PATHS  # imported already: add_parser reads ClientConfig

    return next((name for name, path in PATHS.items() if path == value.rstrip("/")), value)


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from rich.console import Console

    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.runner import BenchSetup, OutputConfig, run_benchmark
    from model_optimizer.optimizer.bench.stopping import Interrupted, RunAborted
    from model_optimizer.optimizer.bench.workers import WorkerFailed
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig

    console = Console()
    configs = (ClientConfig, WorkloadConfig, LoadConfig, OutputConfig)
    if args.compare_args:
        from model_optimizer.optimizer.bench.compare import print_comparison

        a, b = _compare_paths(args, configs)
        print_comparison(a, b, console)
        return 0
    from model_optimizer.common.fileio import check_writable_folder_path

    client = dataclass_from_args(ClientConfig, args)
    if client.api_key is None and os.environ.get("OPENAI_API_KEY"):
        client.api_key = os.environ["OPENAI_API_KEY"]
    setup = BenchSetup(
        client=client,
        workload=dataclass_from_args(WorkloadConfig, args),
        load=dataclass_from_args(LoadConfig, args),
        output=dataclass_from_args(OutputConfig, args),
    )
    # before the server is asked anything: an empty value was the current folder, a file a raw errno
    check_writable_folder_path(setup.output.output_dir, "--output-dir")
    try:
        results = run_benchmark(setup, console)
    except KeyboardInterrupt:  # before the first run started (the runs handle SIGINT themselves)
        console.print(f"interrupted: {_saved(setup.output.output_dir)}")
        return 130
    except Interrupted as exc:  # the run in progress is saved, marked interrupted
        console.print(f"interrupted ({exc.signal_name}): {_saved(setup.output.output_dir)}")
        return exc.exit_code
    except RunAborted as exc:
        print(f"mopt bench: error: {exc}; {_saved(setup.output.output_dir)}", file=sys.stderr)
        return 1
    except WorkerFailed as exc:  # a client process died or raised: the run has no result, say which and why
        if getattr(args, "debug", False) or os.environ.get("MOPT_DEBUG"):
            raise
        print(f"mopt bench: error: {exc}; {_saved(setup.output.output_dir)}", file=sys.stderr)
        return 1
    console.print(f"report: {os.path.join(setup.output.output_dir, 'report.html')}")
    return 0 if all(r["summary"]["num_ok"] for r in results) else 1


def _saved(folder: str) -> str:
    """Where the runs that finished are, or that none did (the folder is made with the first run's file)."""
    import os

    from model_optimizer.optimizer.bench.report import run_files

    if not os.path.isdir(folder) or not run_files(folder):
        return "no run finished"
    return f"runs are saved in {folder} (a run stopped early is marked interrupted)"


def _compare_paths(args: argparse.Namespace, configs: tuple[type, ...]) -> tuple[str, str]:
    """The two paths of `compare A B`; anything else on the command line is refused, never ignored."""
    words = args.compare_args
    if words[0] != "compare":
        raise ValueError(
            f"unexpected argument {words[0]!r}: `mopt bench` takes flags only (see mopt bench --help), "
            "or `mopt bench compare A B`"
        )
    if len(words) != 3:
        raise ValueError(f"compare takes two runs (files or folders): mopt bench compare A B; got {len(words) - 1}")
    given = [f.name for cls in configs for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"compare reads saved runs and takes no run flags; drop {flags}")
    return words[1], words[2]
