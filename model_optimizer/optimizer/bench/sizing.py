"""How many client processes a load needs: `--num-workers auto`.

One worker process (one event loop) is given CHUNKS_PER_WORKER streamed chunks per second and
REQUESTS_PER_WORKER requests per second: about half of what one core sustains in
benchmarks/bench_client_workers.py, so its loop stays responsive and its timestamps on time.
The load's demand is estimated before the run:
- open loop at a finite rate R: R requests/s and R x (mean output length) chunks/s (one chunk
  per token at most);
- trace replay: the same at the trace's own mean rate;
- closed loop at concurrency C, or rate inf (every request in flight at once): min(C, SERVER_MAX_RUNNING)
  streams each receiving a chunk every ASSUMED_ITL_S, a fast server's pace.
auto = the larger of the two needs, at most the CPUs this process may use minus LOCAL_SERVER_CPUS
when the server is on this machine, at most what the plan can keep busy, at least 1.
"""

from __future__ import annotations

import math
import os

from model_optimizer.optimizer.bench.load import RunPlan
from model_optimizer.optimizer.bench.telemetry import is_local
from model_optimizer.optimizer.bench.workers import worker_limit
from model_optimizer.optimizer.bench.workloads import BenchRequest

CHUNKS_PER_WORKER = 10_000
"""Streamed chunks per second given to one worker (about half a core's ceiling)."""
REQUESTS_PER_WORKER = 500
"""Requests per second given to one worker (about half a core's ceiling)."""
ASSUMED_ITL_S = 0.005
"""Gap between one stream's chunks assumed when the load does not set the pace (closed loop, rate inf)."""
SERVER_MAX_RUNNING = 256
"""Streams a server decodes at once at most (vLLM's default max_num_seqs): more wait in its queue."""
LOCAL_SERVER_CPUS = 2
"""CPUs left to a server on this machine: its HTTP frontend and its engine core."""


def num_cpus() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_num_workers(spec: str, plan: RunPlan, requests: list[BenchRequest], base_url: str) -> tuple[int, str]:
    """The number of worker processes for `plan` (`spec`: N or auto) and how it was chosen, in words."""
    limit = worker_limit(plan, requests)
    if spec != "auto":
        wanted = int(spec)
        if wanted > limit:
            return limit, f"--num-workers {wanted}, {limit} kept busy by this load"
        return wanted, f"--num-workers {wanted}"
    chunks, reqs, load = expected_load(plan, requests)
    need = max(1, math.ceil(chunks / CHUNKS_PER_WORKER), math.ceil(reqs / REQUESTS_PER_WORKER))
    cpus = num_cpus()
    spare = cpus - LOCAL_SERVER_CPUS if is_local(base_url) else cpus
    chosen = max(1, min(need, spare, limit))
    why = f"auto: {load}, about {chunks:,.0f} chunks/s, {need} wanted; {cpus} CPUs"
    if is_local(base_url):
        why += f", {LOCAL_SERVER_CPUS} left to the local server"
    return chosen, why


def expected_load(plan: RunPlan, requests: list[BenchRequest]) -> tuple[float, float, str]:
    """(chunks/s, requests/s, the load in words) that `plan` may bring at most."""
    mean_out = max(1.0, sum(r.output_len for r in requests) / len(requests)) if requests else 1.0
    rate = plan.rate
    if plan.mode == "trace":
        stamps = [r.timestamp or 0.0 for r in requests]
        span = (max(stamps) - min(stamps)) / plan.trace_speedup if stamps else 0.0
        rate = len(requests) / span if span > 0 else math.inf
    if rate is not None and math.isfinite(rate):
        return rate * mean_out, rate, f"{rate:.3g} req/s of {mean_out:.0f} tokens"
    if plan.mode == "closed":
        streams, load = plan.concurrency or 1, f"{plan.concurrency} streams"
    else:
        streams = min(x for x in (plan.max_concurrency, plan.num_requests, 1 << 30) if x)
        load = f"{streams} requests at once"
    running = min(streams, SERVER_MAX_RUNNING)
    chunks = running / ASSUMED_ITL_S
    return chunks, chunks / mean_out, load
