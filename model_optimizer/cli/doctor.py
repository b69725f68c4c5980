"""`mopt doctor`: check the GPU stack, say what to fix, and recommend engine settings.

    mopt doctor                      # findings table, fixes for this OS, recommended settings
    mopt doctor --bench              # plus bandwidth and matmul microbenchmarks vs the datasheet
    mopt doctor --json               # the same as one JSON document
    mopt doctor --explain "CUDA driver version is insufficient for CUDA runtime version"
    mopt doctor --snapshot snap.json # evaluate a snapshot recorded elsewhere (--save-snapshot)

Exit codes: 0 all ok, 1 warnings, 2 errors (no GPU is not an error unless --require-gpu); also 2 when the
doctor cannot run at all (a wrong flag or --snapshot file: the reason on stderr, nothing on stdout).
With --explain: 0 when an entry matched, 1 when none did."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OS_CHOICES = ("auto", "debian", "rhel", "wsl", "all")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="diagnose the GPU stack and say exactly what to fix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--bench", action="store_true", help="run microbenchmarks on the GPU (about 15 s)")
    parser.add_argument("--bench-device", type=int, default=0, help="GPU index for --bench (default: 0)")
    parser.add_argument(
        "--remeasure-cpu",
        action="store_true",
        help="measure again which dtype and thread count this CPU runs fastest (cached after the first time)",
    )
    parser.add_argument("--require-gpu", action="store_true", help="treat 'no usable GPU' as an error (exit code 2)")
    parser.add_argument("--explain", metavar="TEXT", help="explain an error message ('-' reads it from stdin)")
    parser.add_argument(
        "--snapshot", metavar="FILE", help="evaluate a recorded snapshot instead of probing this machine"
    )
    parser.add_argument("--save-snapshot", metavar="FILE", help="also write the probe snapshot (JSON) to FILE")
    parser.add_argument(
        "--os",
        dest="os_family",
        choices=OS_CHOICES,
        default="auto",
        help="whose fix commands to show: debian (Ubuntu/Debian), rhel (RHEL/Rocky), wsl, all (default: detected)",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.common.fileio import check_writable_file_path
    from model_optimizer.environment import evaluate, recommended_settings
    from model_optimizer.environment.report import print_report, report_document
    from model_optimizer.environment.snapshot import Snapshot, load_snapshot, write_json_atomic

    if args.explain is not None:
        return _explain(args)
    if args.snapshot and args.bench:
        raise ValueError("--bench measures this machine; it cannot be combined with --snapshot")
    if args.bench_device < 0:
        raise ValueError(f"--bench-device must be a GPU index >= 0, got {args.bench_device}")
    if args.bench_device and not args.bench:
        raise ValueError("--bench-device picks the GPU --bench measures: add --bench")
    for flag, path in (("--snapshot", args.snapshot), ("--save-snapshot", args.save_snapshot)):
        if path is not None and not path.strip():  # an empty path is not "unset": the user named a file
            raise ValueError(f"{flag} is empty: give a file path")
    if args.save_snapshot:
        check_writable_file_path(Path(args.save_snapshot), "--save-snapshot")  # before minutes of probing
    progress = Console(stderr=True)
    if args.snapshot:
        snapshot = load_snapshot(args.snapshot)
    else:
        from model_optimizer.environment import capture_snapshot

        with progress.status("probing driver, CUDA, torch and the system..."):
            snapshot = capture_snapshot()
    if args.bench:
        snapshot["bench"] = _bench(snapshot, args.bench_device, progress)
    if not args.snapshot and not Snapshot(snapshot).gpu_usable:
        from model_optimizer.environment.cpu_speed import cpu_speed

        with progress.status("timing float32 and bfloat16 matmuls on this CPU..."):
            snapshot["cpu_speed"] = cpu_speed(refresh=args.remeasure_cpu).to_dict()
    if args.save_snapshot:
        write_json_atomic(args.save_snapshot, snapshot)
    findings = evaluate(snapshot, require_gpu=args.require_gpu)
    doc = report_document(snapshot, findings, recommended_settings(snapshot))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        family = Snapshot(snapshot).os_family if args.os_family == "auto" else args.os_family
        print_report(Console(), doc, family)
    return doc["exit_code"]


def _bench(snapshot: dict[str, Any], index: int, console: Any) -> dict[str, Any]:
    from rich.progress import Progress

    from model_optimizer.environment.bench import run_bench
    from model_optimizer.environment.snapshot import Snapshot

    snap = Snapshot(snapshot)
    if not snap.gpu_usable:
        return {"ok": False, "reason": "no GPU usable by torch"}
    if index >= int(snap.torch.get("device_count") or 0):
        raise ValueError(f"--bench-device {index} does not exist; torch sees {snap.torch.get('device_count')} GPU(s)")
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("microbenchmarks", total=6)
        return run_bench("cuda", index, on_step=lambda name: bar.update(task, advance=1, description=name))


def _explain(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rich.console import Console

    from model_optimizer.environment.explain import explain
    from model_optimizer.environment.probes.system import probe_system
    from model_optimizer.environment.report import print_explain

    text = sys.stdin.read() if args.explain == "-" else args.explain
    matches = explain(text)
    if args.json:
        print(json.dumps({"matches": [asdict(m) for m in matches]}, indent=1))
    else:
        family = probe_system()["os_family"] if args.os_family == "auto" else args.os_family
        print_explain(Console(), text, matches, family)
    return 0 if matches else 1


def main(argv: list[str] | None = None) -> int:
    """Run `mopt doctor` without the `mopt` entry point (scripts, `python -m`)."""
    parser = argparse.ArgumentParser(
        prog="mopt doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"mopt doctor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
