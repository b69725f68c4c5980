"""How many requests per second can the `mopt bench` client drive? (issue 7: the client is never the bottleneck)

A trivial streaming endpoint (a raw asyncio HTTP/1.1 server answering every POST at once with
a fixed OpenAI-style SSE stream) runs in a subprocess pinned to CPU 1; the client (the same
BenchClient + run_load + LoopLagMonitor that `mopt bench` uses) runs pinned to CPU 0. So the
whole measurement fits on 2 cores, and the figures are the client's ceiling on one core.

Closed loop at several concurrencies gives the highest request rate; open loop at fixed rates
shows how precisely the client keeps an arrival schedule (send lag) as the rate climbs.

Run:  .venv/bin/python benchmarks/bench_client_overhead.py [--seconds 4]
Writes: benchmarks/results/bench_client_overhead.json (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import cpu_model

CHUNKS = 16
"""Token chunks in each streamed answer."""


def sse_body(num_chunks: int) -> bytes:
    chunk = json.dumps({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": " tok"}]})
    usage = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": num_chunks}})
    return ("".join(f"data: {chunk}\n\n" for _ in range(num_chunks)) + f"data: {usage}\n\ndata: [DONE]\n\n").encode()


async def serve(num_chunks: int) -> None:
    """Answer every request on a kept-alive connection with the same SSE stream."""
    body = sse_body(num_chunks)
    head = f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n".encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in header.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < os.cpu_count():
        os.sched_setaffinity(0, {cpu})


async def measure(base_url: str, plan, seconds: float) -> dict:
    import numpy as np

    from model_optimizer.optimizer.bench.client import BenchClient, ClientConfig
    from model_optimizer.optimizer.bench.load import run_load
    from model_optimizer.optimizer.bench.metrics import summarize
    from model_optimizer.optimizer.bench.overhead import LoopLagMonitor, overhead_report
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    requests = [BenchRequest(list(range(100, 108)), 8, CHUNKS)]
    async with BenchClient(ClientConfig(base_url=base_url, model="m"), plan.slots(), 0.0) as client:
        bodies = [client.body(r) for r in requests]
        monitor = LoopLagMonitor()
        monitor.start()
        records = await run_load(client, plan, requests, bodies, np.random.default_rng(0))
        loop = await monitor.stop()
    s, o = summarize(records), overhead_report(records, loop)
    return {
        "label": plan.label,
        "mode": plan.mode,
        "concurrency": plan.concurrency,
        "target_rate": plan.rate,
        "num_requests": s["num_requests"],
        "num_failed": s["num_failed"],
        "request_rate": s["request_rate"],
        "chunks_per_s": s["output_throughput"],
        "e2e_p50_ms": s["e2e_ms"]["p50"],
        "e2e_p99_ms": s["e2e_ms"]["p99"],
        "client_cpu": o["cpu_per_wall_s"],
        # CPU-seconds the client spent per request: its ceiling on one free core is 1000 / this
        "client_cpu_ms_per_request": 1e3 * o["cpu_per_wall_s"] / s["attempted_rate"] if s["attempted_rate"] else None,
        "loop_lag_p99_ms": o["loop_lag_ms"]["p99"],
        "send_lag_p50_ms": o["send_lag_ms"]["p50"],
        "send_lag_p99_ms": o["send_lag_ms"]["p99"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each measured run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_client_overhead.json"))
    args = parser.parse_args()
    if args.serve:
        pin(1)
        asyncio.run(serve(CHUNKS))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rich.console import Console
    from rich.progress import Progress

    from model_optimizer.optimizer.bench.load import RunPlan
    from model_optimizer.optimizer.bench.report import atomic_write

    pin(0)
    load_before = os.getloadavg()
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        base_url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        plans = [
            RunPlan("closed", concurrency=c, duration=args.seconds, label=f"closed c={c}") for c in (1, 8, 32, 128)
        ]
        plans += [
            RunPlan("constant", rate=r, duration=args.seconds, label=f"constant {r} req/s") for r in (200, 500, 1000)
        ]
        plans += [RunPlan("poisson", rate=r, duration=args.seconds, label=f"poisson {r} req/s") for r in (500,)]
        rows = []
        with Progress(console=Console(stderr=True)) as progress:
            task = progress.add_task("client overhead", total=len(plans))
            for plan in plans:
                rows.append(asyncio.run(measure(base_url, plan, args.seconds)))
                progress.advance(task)
    finally:
        server.terminate()
        server.wait()
    result = {
        "benchmark": "bench_client_overhead",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "client_cpu": 0,
            "server_cpu": 1,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": {"httpx": __import__("httpx").__version__},
        "workload": {
            "endpoint": "completions (streamed)",
            "chunks_per_response": CHUNKS,
            "prompt_tokens": 8,
            "server": "raw asyncio HTTP/1.1, answers at once",
            "seconds_per_run": args.seconds,
        },
        "max_request_rate": max(r["request_rate"] for r in rows),
        "min_client_cpu_ms_per_request": min(
            r["client_cpu_ms_per_request"] for r in rows if r["client_cpu_ms_per_request"]
        ),
        "runs": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, json.dumps(result, indent=1))
    for r in rows:
        print(
            f"{r['label']:>22}: {r['request_rate']:7.1f} req/s  cpu {r['client_cpu']:.2f} "
            f"({r['client_cpu_ms_per_request']:.2f} ms/request)  "
            f"send lag p99 {r['send_lag_p99_ms']:.2f} ms  loop lag p99 {r['loop_lag_p99_ms']:.2f} ms"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
