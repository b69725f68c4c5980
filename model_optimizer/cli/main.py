"""`mopt` entry point. Each subcommand is a module in this package exposing
`add_parser(subparsers)` and `run(args) -> int`; modules import heavy libraries inside `run`.

A ValueError or an OSError (a file that does not exist or cannot be written, a full disk) escaping a
command is the user's input or machine being wrong: one line `mopt CMD: error: ...` and exit code 2. Ctrl-C is a clean exit 130. `--debug` (before or after the
command) or MOPT_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import model_optimizer
import model_optimizer.cli as cli_package

NOT_COMMANDS = {"main", "args"}
DEBUG_HELP = "show the full traceback of an error (also MOPT_DEBUG=1)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mopt", description="Model-Optimizer: from checkpoint to fast service.")
    parser.add_argument("--version", action="version", version=f"mopt {model_optimizer.__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cli_package.__path__), key=lambda m: m.name):
        if info.name in NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{cli_package.__name__}.{info.name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
        try:  # SUPPRESS: absent unless given, so it cannot overwrite `mopt --debug CMD`
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        except argparse.ArgumentError:
            pass  # the command has its own --debug
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    debug = getattr(args, "debug", False) or os.environ.get("MOPT_DEBUG", "").strip().lower() in (
        "1",
        "true",
        "yes",
        "on",
    )
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"mopt {args.command}: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports a Ctrl-C
    except BrokenPipeError:  # `mopt ... | head` closed stdout: stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141  # 128 + SIGPIPE
    except (ValueError, OSError) as exc:  # OSError: a path that cannot be read or written, a full disk
        if debug:
            raise
        print(f"mopt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
