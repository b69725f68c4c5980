"""`mopt top`: a live terminal dashboard of a server's /metrics (ours or vLLM's), or one JSON snapshot.
When stdout is not a terminal (a pipe, a file) it prints one plain line per scrape instead."""

from __future__ import annotations

import argparse

MAX_INTERVAL_S = 86400.0
"""A day between scrapes; time.sleep overflows on much longer ones."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "top",
        help="live terminal dashboard of a running server's /metrics (mopt or vLLM)",
        description="Poll a server's /metrics and show requests running / waiting, request and token rates, "
        "TTFT / TPOT / ITL / E2E / queue p50, p99 and mean over the last interval, KV-cache usage, "
        "prefix-cache hit rate, preemptions, errors by status and (on this machine) GPU state. "
        "A server that goes away shows as unreachable, one that answers an error or serves no engine metrics "
        "says so; polling goes on. "
        "When stdout is not a terminal (a pipe, a file) each scrape is one plain line.",
    )
    parser.add_argument(
        "--url",
        default="http://127.0.0.1:8000",
        help="server base URL; an OpenAI base URL (.../v1) is taken too (default: %(default)s)",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes (default: %(default)s)")
    parser.add_argument(
        "--api-key",
        default=None,
        help="API key for /metrics when the server has --metrics-auth (default: MOPT_API_KEY)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="scrape twice, --interval apart, print one snapshot, exit (1 unless engine metrics were read)",
    )
    parser.add_argument("--json", action="store_true", help="with --once: print the snapshot as JSON")
    parser.add_argument("--no-gpu", dest="gpu", action="store_false", help="do not read local GPUs through NVML")
    return parser


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time

    from rich.console import Console
    from rich.live import Live

    from model_optimizer.optimizer.bench.client import check_base_url
    from model_optimizer.optimizer.top.render import plain_line, render
    from model_optimizer.optimizer.top.view import Monitor

    # NaN failed in time.sleep with a message naming no flag, inf or 1e10 as an OverflowError traceback
    if not 0 < args.interval <= MAX_INTERVAL_S:
        raise ValueError(f"--interval must be > 0 and at most {MAX_INTERVAL_S:g} seconds, got {args.interval}")
    check_base_url(args.url, "--url")  # a URL that can never answer is an input error, not "unreachable"
    if args.json and not args.once:
        raise ValueError("--json prints one snapshot: use it with --once")
    monitor = Monitor(args.url, api_key(args.api_key), gpu=args.gpu)
    if args.once:
        view = monitor.poll()
        if view.ok:
            time.sleep(args.interval)
            view = monitor.poll()
        if args.json:
            print(json.dumps(view.to_json(), indent=2))
        else:
            Console().print(render(view))  # no retry_s: none will come
        return 0 if view.ok else 1
    # Ctrl-C ends it as every command does: main's "interrupted" and exit code 130
    if not sys.stdout.isatty():  # a pipe or file: Live would write only its last frame, at exit
        while True:
            print(plain_line(monitor.poll()), flush=True)  # `| head` ends it with a broken pipe
            time.sleep(args.interval)
    with Live(render(monitor.poll(), args.interval), auto_refresh=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(render(monitor.poll(), args.interval), refresh=True)


def api_key(flag: str | None) -> str | None:
    """--api-key, else MOPT_API_KEY; a ValueError for one an HTTP header cannot carry, which otherwise
    failed every poll as "unreachable 'ascii' codec can't encode ..."."""
    import os

    key, name = (flag, "--api-key") if flag else (os.environ.get("MOPT_API_KEY"), "MOPT_API_KEY")
    bad = next((i for i, char in enumerate(key or "") if not (char.isascii() and char.isprintable())), None)
    if bad is not None:  # the key itself stays out of the message: it is a secret
        raise ValueError(f"{name} must be printable ASCII (an HTTP header carries it): character {bad + 1} is not")
    return key or None
