"""`mopt` entry point. Each subcommand is a module in this package exposing
`add_parser(subparsers)` and `run(args) -> int`; modules import heavy libraries inside `run`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import model_optimizer
import model_optimizer.cli as cli_package

NOT_COMMANDS = {"main", "args"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mopt", description="Model-Optimizer: from checkpoint to fast service.")
    parser.add_argument("--version", action="version", version=f"mopt {model_optimizer.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cli_package.__path__), key=lambda m: m.name):
        if info.name in NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{cli_package.__name__}.{info.name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"mopt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
