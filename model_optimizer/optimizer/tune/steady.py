"""Trial figures of the steady state, not of the start: the warm-up default and the closed loop's first wave.

Two things made one trial's goodput a poor measure of its settings (the same defaults measured several
times apart on one H200: README "Tune: mopt tune", steady-state measurements): first-use costs
(compilation, CUDA graph capture, allocator growth) landing in the first requests, and the closed loop's
start, when all C clients send at the same instant so the last of C prompts waits behind the other C - 1
prefills. p99 TTFT over a few hundred requests is then a figure of that
burst, not of the load the user will serve.

* Warm-up: every trial first sends `num_warmups` requests of the workload's shape (the bench's
  `--num-warmups`, uncounted); the default, max(2 x concurrency, 32), runs the burst and one more full
  wave of the closed loop, so each code path (prefill of a full batch, mixed steps, decode) has run.
* The first wave: of the measured closed loop, only requests sent after the first C count. We chose this
  over a staggered start (clients starting over a ramp): a ramp's length must match the engine's request
  latency, unknown before the measurement (too short keeps the burst, too long under-loads the server and
  lowers its throughput), while "after the first C" needs no parameter. Later requests are sent as earlier
  ones finish, i.e. at the closed loop's steady pace, and the selection is by request index, so it is as
  deterministic as the workload itself (its prompts follow --seed). Rates are counted over the window from
  the first counted send to the last counted end (bench.metrics.summarize's duration).
"""

from __future__ import annotations

from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.metrics import parse_slo, summarize

MIN_WARMUPS = 32


def default_warmups(load: LoadConfig) -> int:
    """max(2 x the clients in flight, 32): the start-up burst and one more wave of the closed loop."""
    in_flight = load.concurrency if load.load_mode == "closed" else load.max_concurrency
    if load.load_mode == "sweep":
        in_flight = load.sweep_max_concurrency
    return max(2 * (in_flight or 0), MIN_WARMUPS)


def record_from_dict(d: dict) -> RequestRecord:
    """A saved request (bench.report.record_to_dict) back as a record."""
    return RequestRecord(
        index=d["index"],
        prompt_len=d["prompt_len"],
        output_len_requested=d["output_len_requested"],
        scheduled=d.get("scheduled", 0.0),
        send=d["send"],
        end=d["end"],
        chunk_times=list(d.get("chunk_times") or []),
        chunk_tokens=list(d.get("chunk_tokens") or []),  # absent in runs saved before merged chunks
        output_tokens=d.get("output_tokens", 0),
        prompt_tokens=d.get("prompt_tokens"),
        error=d.get("error"),
        error_detail=d.get("error_detail", ""),
    )


def first_wave(run: dict) -> int:
    """How many requests of a saved run form its start-up burst: the closed loop's concurrency, else 0
    (open-loop arrivals are spread by their schedule)."""
    plan = run.get("plan") or {}
    return int(plan.get("concurrency") or 0) if plan.get("mode") == "closed" else 0


def steady_summary(run: dict, slo: str | None, skip_first_wave: bool) -> tuple[dict, int]:
    """(summary, requests left out) of a saved bench run: its own summary, or, with `skip_first_wave`, one
    over the requests sent after the first wave. When the run has no more requests than the wave, it is all
    start-up: its own summary is kept and nothing is left out."""
    skip = first_wave(run) if skip_first_wave else 0
    requests = run.get("requests") or []
    if skip <= 0 or len(requests) <= skip:
        return run["summary"], 0
    counted = [record_from_dict(d) for d in requests if d["index"] >= skip]
    return summarize(counted, parse_slo(slo)), skip
