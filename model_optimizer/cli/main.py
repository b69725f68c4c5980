"""`mopt` entry point. Each subcommand is a module in this package exposing
`add_parser(subparsers)` and `run(args) -> int`; modules import heavy libraries inside `run`.

A ValueError or an OSError (a file that does not exist or cannot be written, a full disk) escaping a
command is the user's input or machine being wrong: one line `mopt CMD: error: ...` and exit code 2. Ctrl-C is a clean exit 130. `--debug` (before or after the
command) or MOPT_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

import model_optimizer
import model_optimizer.cli as cli_package

NOT_COMMANDS = {"main", "args"}
DEBUG_HELP = "show the full traceback of an error (also MOPT_DEBUG=1)"


@functools.cache
def command_names() -> tuple[str, ...]:
    """Every subcommand: the modules of this package, sorted (listed once a process)."""
    names = (info.name for info in pkgutil.iter_modules(cli_package.__path__))
    return tuple(sorted(name for name in names if name not in NOT_COMMANDS and not name.startswith("_")))


def command_of(argv: Sequence[str]) -> str | None:
    """The module of the subcommand `argv` runs (`compile-cache` -> compile_cache), when it names one
    before anything but `--debug`; None otherwise (`mopt --help`, `mopt --version`, a misspelt
    command: those get the parser of every command)."""
    for token in argv:
        if token == "--debug":
            continue
        name = token.replace("-", "_")
        return name if not token.startswith("-") and name in command_names() else None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """`mopt`'s parser. Given the arguments to parse, only the command they name gets its subparser:
    building all of them imports every command's config module (the bench client's httpx, numpy and
    pydantic), which `mopt serve` would pay before it starts the engine."""
    parser = argparse.ArgumentParser(prog="mopt", description="Model-Optimizer: from checkpoint to fast service.")
    parser.add_argument("--version", action="version", version=f"mopt {model_optimizer.__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = command_of(argv) if argv is not None else None
    for name in [only] if only else command_names():
        module = importlib.import_module(f"{cli_package.__name__}.{name}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
        try:  # SUPPRESS: absent unless given, so it cannot overwrite `mopt --debug CMD`
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        except argparse.ArgumentError:
            pass  # the command has its own --debug
    return parser


def dashed_flags(argv: list[str], options: set[str]) -> list[str]:
    """`--max_model_len 4096` as `--max-model-len 4096`, as vLLM's parser takes underscores in flag names:
    only a token whose dashed name is one of `options`, never after `--`, so values stay as written."""
    out = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        name, sep, value = token.partition("=")
        if name.startswith("--") and "_" in name and name.replace("_", "-") in options:
            token = name.replace("_", "-") + sep + value
        out.append(token)
    return out


def long_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every --option of `parser` and of the subcommand parsers it holds."""
    found: set[str] = set()
    for action in parser._actions:  # argparse keeps no public list of them
        found.update(o for o in action.option_strings if o.startswith("--"))
        for sub in (
            (getattr(action, "choices", None) or {}).values() if isinstance(action, argparse._SubParsersAction) else ()
        ):
            found |= long_options(sub)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    argv = dashed_flags(argv, long_options(parser))
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
    except SystemExit as exc:  # rich's console meets the closed pipe itself and exits 1, which doctor and
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):  # inspect document as a finding
            return 141
        raise
    except (ValueError, OSError) as exc:  # OSError: a path that cannot be read or written, a full disk
        if debug:
            raise
        print(f"mopt {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
