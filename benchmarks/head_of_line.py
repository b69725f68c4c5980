"""Head-of-line blocking: does a long prompt stall the streams already running?

    .venv/bin/python benchmarks/head_of_line.py [--long-prompt 2000] [--streams 4] [--output FILE]

`mopt serve` (the built-in model, float32 on the CPU, the decode-stall bound at its default) runs in a
subprocess; `--streams` streaming completions start and run alone for `--alone-chunks` chunks, then one request with
a `--long-prompt`-token prompt arrives while they run. Per running stream, the time between its chunks
is recorded before the long prompt (its pace alone) and while the long prompt is being prefilled (from
its arrival to its first token). The issue's bar: the gaps while it prefills stay within 2x the pace
alone (`max_decode_stall`, default 2 on the CPU). `--stall 0` turns the bound off for comparison.

Writes benchmarks/results/head_of_line_cpu.json: the medians and p90s of both, their ratio, the long
prompt's TTFT, and the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
from common import RESULTS, environment, write_json

from model_optimizer.optimizer.tune.server_process import ServerProcess, free_port

REPO = Path(__file__).resolve().parents[1]


def stream(url: str, body: dict, times: list[float], done: threading.Event) -> None:
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=600) as r:
        if r.status_code != 200:
            raise SystemExit(f"request failed: {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    done.set()


def gaps(times: list[float], start: float, end: float) -> list[float]:
    return [b - a for a, b in zip(times, times[1:]) if start <= a and b <= end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long-prompt", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--alone-chunks", type=int, default=20, help="chunks each stream gets alone first")
    parser.add_argument("--stall", type=float, default=None, help="--max-decode-stall (default: the engine's)")
    parser.add_argument("--output", default=str(RESULTS / "head_of_line_cpu.json"))
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--dtype", "float32", "--max-model-len", "2048", "--port", str(port)]
    if args.stall is not None:
        flags += ["--max-decode-stall", str(args.stall)]
    argv = [sys.executable, "-m", "model_optimizer.cli.main", "serve", *flags]
    with ServerProcess(argv, Path("/tmp/head_of_line_server.log"), {"PYTHONPATH": str(REPO)}, cwd=REPO) as server:
        server.wait_ready(url + "/ready", 600)
        body = {"prompt": "The json module", "max_tokens": 1500, "ignore_eos": True, "temperature": 0.0}
        times: list[list[float]] = [[] for _ in range(args.streams)]
        dones = [threading.Event() for _ in range(args.streams)]
        threads = [threading.Thread(target=stream, args=(url, body, t, d)) for t, d in zip(times, dones)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 600
        while min(len(t) for t in times) < args.alone_chunks and time.monotonic() < deadline:
            time.sleep(0.05)
        arrived = time.perf_counter()
        long_times: list[float] = []
        long_body = {"prompt": [(7 * i) % 3000 + 10 for i in range(args.long_prompt)], "max_tokens": 1}
        long_done = threading.Event()
        stream(url, long_body, long_times, long_done)
        first_token = long_times[0] if long_times else time.perf_counter()
        server.stop()
    alone = [g for t in times for g in gaps(t, 0.0, arrived)]
    during = [g for t in times for g in gaps(t, arrived, first_token)]
    result = {
        "benchmark": "head_of_line",
        "long_prompt_tokens": args.long_prompt,
        "streams": args.streams,
        "max_decode_stall": args.stall,
        "gap_alone_ms": {"p50": 1e3 * statistics.median(alone), "p90": 1e3 * _p90(alone)},
        "gap_during_long_prefill_ms": {"p50": 1e3 * statistics.median(during), "max": 1e3 * max(during)}
        if during
        else None,
        "long_prompt_ttft_s": first_token - arrived,
        "environment": environment(),
    }
    if during:
        result["max_gap_over_pace"] = round(max(during) / statistics.median(alone), 2)
    print(json.dumps(result, indent=2))
    print(f"wrote {write_json(args.output, result)}")


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


if __name__ == "__main__":
    main()
