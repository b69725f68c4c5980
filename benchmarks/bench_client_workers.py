"""How many streamed chunks per second can `mopt bench` take in with 1, 2, 4 ... worker processes?

The proof of the client's headroom (issue 26, item 4), against a fake server with no engine: K
processes share one port (SO_REUSEPORT), each a raw asyncio HTTP/1.1 server that answers every
POST with an OpenAI-style SSE stream of --chunks chunks of one token each, shaped like a
`mopt serve` completion chunk and written one by one (Transfer-Encoding: chunked, as uvicorn
sends a stream) as fast as the client takes them. The client is `mopt bench`'s own code
(workers.execute_plan: BenchClient, the closed loop, LoopLagMonitor) at --concurrency for
--seconds, once per worker count. The server processes are pinned to the last K CPUs and the
client (its spawned workers inherit the affinity) to the others; the server's CPU is recorded, so
a row where the server, not the client, was the limit shows as such.

Run:     python benchmarks/bench_client_workers.py [--workers 1,2,4] [--server-procs K] [--seconds S]
Writes:  benchmarks/results/bench_client_workers.json (--out to change)
On this project's 2-core VM the client and the server share the machine, so only the 1-worker
figure (one core's ceiling) means much; scripts/device/bench_client_h200.sh runs it on 16 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from common import cpu_model

CHUNK = json.dumps(
    {
        "id": "cmpl-5f0c2a9d3b7e4c1f8a6b2d4e",
        "object": "text_completion",
        "created": 1767225600,
        "model": "qwen3-0.6b",
        "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None, "stop_reason": None}],
        "usage": None,
    }
)


def frame(data: str) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    event = f"data: {data}\n\n".encode()
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


async def serve(port: int, num_chunks: int, ready_fd: int | None) -> None:
    """Answer every request of a kept-alive connection with `num_chunks` token chunks, usage and [DONE]."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    token = frame(CHUNK)
    usage = {"prompt_tokens": 8, "completion_tokens": num_chunks, "total_tokens": 8 + num_chunks}
    tail = frame(json.dumps({"id": "x", "object": "text_completion", "choices": [], "usage": usage}))
    tail += frame("[DONE]") + b"0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(x.split(b":")[1]) for x in header.split(b"\r\n") if x.lower().startswith(b"content-length:")),
                    0,
                )
                await reader.readexactly(length)
                writer.write(head)
                for _ in range(num_chunks):
                    writer.write(token)
                    await writer.drain()
                    await asyncio.sleep(0)  # one chunk per turn: streams interleave as a server's steps do
                writer.write(tail)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, reuse_port=True, backlog=4096)
    if ready_fd is not None:
        os.write(ready_fd, f"{server.sockets[0].getsockname()[1]}\n".encode())
    await server.serve_forever()


def start_servers(num_procs: int, cpus: list[int], num_chunks: int) -> tuple[list[subprocess.Popen], int]:
    """`num_procs` server processes on one port, process i pinned to cpus[i % len(cpus)]."""
    procs, port = [], 0
    for i in range(num_procs):
        cmd = [
            sys.executable,
            __file__,
            "--serve",
            str(port),
            "--chunks",
            str(num_chunks),
            "--cpu",
            str(cpus[i % len(cpus)]),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        port = int(proc.stdout.readline())  # the first picks the port; the others join it
        procs.append(proc)
    return procs, port


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes, from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure(base_url: str, num_workers: int, args, server_pids: list[int]) -> dict:
    import numpy as np

    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import RunPlan
    from model_optimizer.optimizer.bench.metrics import summarize
    from model_optimizer.optimizer.bench.overhead import overhead_report
    from model_optimizer.optimizer.bench.request_options import request_body
    from model_optimizer.optimizer.bench.workers import execute_plan
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    cfg = ClientConfig(base_url=base_url, model="m")
    requests = [BenchRequest(list(range(100, 108)), 8, args.chunks)]
    plan = RunPlan("closed", concurrency=args.concurrency, duration=args.seconds, label=f"{num_workers} workers")
    server_cpu0 = cpu_seconds(server_pids)
    records, loops = asyncio.run(
        execute_plan(
            cfg, plan, requests, [request_body(cfg, r) for r in requests], np.random.default_rng(0), num_workers
        )
    )
    s, o = summarize(records), overhead_report(records, loops)
    server_cpu = (cpu_seconds(server_pids) - server_cpu0) / s["duration_s"]  # idle while the workers start
    chunks = sum(len(r.chunk_times) for r in records if r.ok)
    return {
        "workers": len(loops),
        "concurrency": args.concurrency,
        "num_requests": s["num_requests"],
        "num_failed": s["num_failed"],
        "duration_s": s["duration_s"],
        "request_rate": s["request_rate"],
        "chunks_per_s": chunks / s["duration_s"],
        "tokens_per_s": s["output_throughput"],
        "e2e_p50_ms": s["e2e_ms"]["p50"],
        "client_cpu": o["cpu_per_wall_s"],
        "client_cpu_busiest_worker": o["cpu_per_worker_max"],
        "client_cpu_us_per_chunk": 1e6 * o["cpu_per_wall_s"] * s["duration_s"] / chunks if chunks else None,
        "loop_lag_p99_ms": o["loop_lag_ms"]["p99"],
        "server_cpu": server_cpu,
        "per_worker": [{k: w[k] for k in ("num_requests", "cpu_per_wall_s")} for w in loops],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts to measure, comma-separated")
    parser.add_argument("--server-procs", type=int, default=1, help="fake server processes (one port)")
    parser.add_argument("--seconds", type=float, default=6.0, help="load time of each measurement")
    parser.add_argument("--concurrency", type=int, default=256, help="streams in flight (closed loop)")
    parser.add_argument("--chunks", type=int, default=128, help="token chunks per answer")
    parser.add_argument("--no-pin", action="store_true", help="let client and server share every CPU")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_client_workers.json"))
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        if args.cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {args.cpu})
        asyncio.run(serve(args.serve, args.chunks, sys.stdout.fileno()))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from model_optimizer.common.fileio import atomic_write

    cpus = sorted(os.sched_getaffinity(0))
    num_server_cpus = min(args.server_procs, len(cpus) - 1)
    server_cpus = cpus if args.no_pin else cpus[len(cpus) - num_server_cpus :]
    client_cpus = cpus if args.no_pin else cpus[: len(cpus) - num_server_cpus]
    load_before = os.getloadavg()
    servers, port = start_servers(args.server_procs, server_cpus, args.chunks)
    rows = []
    try:
        os.sched_setaffinity(0, set(client_cpus))  # the workers spawned from here inherit it
        for n in (int(x) for x in args.workers.split(",")):
            rows.append(measure(f"http://127.0.0.1:{port}", n, args, [p.pid for p in servers]))
            r = rows[-1]
            print(
                f"{r['workers']} workers: {r['chunks_per_s']:9,.0f} chunks/s {r['tokens_per_s']:9,.0f} tok/s "
                f"{r['request_rate']:7,.0f} req/s  client CPU {r['client_cpu']:.2f} (busiest "
                f"{r['client_cpu_busiest_worker']:.2f})  server CPU {r['server_cpu']:.2f}  "
                f"loop lag p99 {r['loop_lag_p99_ms']:.1f} ms",
                flush=True,
            )
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait()
    base = rows[0]["chunks_per_s"] if rows else None
    result = {
        "benchmark": "bench_client_workers",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu": cpu_model(),
            "cpus": len(cpus),
            "client_cpus": client_cpus,
            "server_cpus": server_cpus,
            "hostname": socket.gethostname(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": {"httpx": __import__("httpx").__version__},
        "workload": {
            "endpoint": "completions (streamed, chunked transfer encoding)",
            "chunks_per_response": args.chunks,
            "tokens_per_chunk": 1,
            "chunk_bytes": len(frame(CHUNK)),
            "concurrency": args.concurrency,
            "seconds_per_run": args.seconds,
            "server": f"{args.server_procs} raw asyncio process(es) on one port (SO_REUSEPORT), no engine",
        },
        "runs": rows,
        "chunks_per_s_vs_1_worker": {str(r["workers"]): r["chunks_per_s"] / base for r in rows} if base else {},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
