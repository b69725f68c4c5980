"""Save and show results: one JSON per run (atomic), CSV files, a summary table, report.html."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import re
import socket
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from model_optimizer.common.fileio import atomic_write
from model_optimizer.optimizer.bench import fmt
from model_optimizer.optimizer.bench.html import write_html
from model_optimizer.optimizer.bench.metrics import LATENCIES, STATS
from model_optimizer.optimizer.bench.record import RequestRecord

SCHEMA = "mopt-bench-run/1"
CACHED_WARN = 0.5
"""Prefix-cache hit rate above which prompts without shared prefixes were evidently sent before."""
MIN_P99_REQUESTS = 100
"""Fewer measured requests than this and p99 is (nearly) the maximum: a run says so before its table."""
RATE_KEYS = ("request_rate", "output_throughput", "total_throughput", "goodput")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "run"


RUN_FILE = re.compile(r"^run-(\d+)-.*\.json$")


def run_files(folder: str | Path) -> list[Path]:
    """The run JSON files of a folder, in run-number order."""
    found = [(int(m.group(1)), p) for p in Path(folder).glob("run-*.json") if (m := RUN_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def reserve_run_path(folder: str | Path, label: str) -> Path:
    """Claim the next free run-NN-<label>.json of `folder` (created empty, and the folder with it), so no
    earlier run is overwritten.

    Numbers continue after the highest one in the folder; the exclusive create makes two
    benchmarks writing into one folder take different numbers."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    existing = [int(m.group(1)) for p in Path(folder).glob("run-*") if (m := re.match(r"^run-(\d+)-", p.name))]
    number = max(existing, default=0) + 1
    while True:
        path = Path(folder) / f"run-{number:02d}-{slug(label)}.json"
        try:
            with open(path, "x"):
                return path
        except FileExistsError:
            number += 1


def load_runs(folder: str | Path) -> list[dict]:
    """Every readable run of a folder (each with its `path`), in run-number order."""
    runs = []
    for path in run_files(folder):
        try:
            run = load_run(str(path))
        except ValueError:
            continue  # a run being written, or a file someone else left there
        runs.append(run | {"path": str(path)})
    return runs


def write_json(path: str | Path, result: dict) -> None:
    atomic_write(path, json.dumps({k: v for k, v in result.items() if k != "path"}, indent=1))


def load_run(path: str) -> dict:
    """Read a run JSON written by `mopt bench`, with a clear error for anything else."""
    if Path(path).is_dir():
        raise ValueError(f"{path} is a folder; give one of its run-NN-*.json files")
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a run file written by mopt bench (schema {SCHEMA})")
    return data


def record_to_dict(rec: RequestRecord) -> dict:
    return {
        "index": rec.index,
        "prompt_len": rec.prompt_len,
        "prompt_tokens": rec.prompt_tokens,
        "output_len_requested": rec.output_len_requested,
        "output_tokens": rec.output_tokens,
        "token_count_source": rec.token_count_source,
        "scheduled": round(rec.scheduled, 6),
        "queue_wait": round(rec.queue_wait, 6),
        "send": round(rec.send, 6),
        "end": round(rec.end, 6),
        "ttft": None if rec.ttft is None else round(rec.ttft, 6),
        "error": rec.error,
        "error_detail": rec.error_detail,
        "chunk_times": [round(t, 6) for t in rec.chunk_times],
        "chunk_tokens": rec.chunk_tokens,
    }


def environment() -> dict:
    import httpx

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "httpx": httpx.__version__,
        "client_cpus": cpus,
    }


def flat_summary(result: dict) -> dict[str, float | int | str | None]:
    """One flat row of a run's headline figures (for CSV and compare)."""
    s = result["summary"]
    row: dict = {
        "label": result["label"],
        "num_requests": s["num_requests"],
        "num_failed": s["num_failed"],
        "duration_s": s["duration_s"],
    }
    row |= {k: s[k] for k in RATE_KEYS if k in s}
    for metric in LATENCIES:
        for stat in STATS:
            row[f"{metric}_{stat}_ms"] = s[f"{metric}_ms"][stat]
    if "slo_attainment" in s:
        row["slo_attainment"] = s["slo_attainment"]
    row["client_send_lag_p99_ms"] = result["client_overhead"]["send_lag_ms"]["p99"]
    row["client_loop_lag_p99_ms"] = result["client_overhead"]["loop_lag_ms"]["p99"]
    row["client_num_workers"] = result.get("num_workers", 1)
    sources = s.get("output_tokens_from") or {}
    row["output_tokens_from"] = " ".join(f"{k}:{v}" for k, v in sorted(sources.items()))
    row["behind_schedule"] = bool((s.get("schedule") or {}).get("behind"))
    row["interrupted"] = bool(result.get("interrupted"))
    return row


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for row in rows for k in row))
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_outputs(results: list[dict], output_dir: str) -> None:
    """summary.csv (a row per run), requests CSV per run, and report.html with plots."""
    out = Path(output_dir)
    atomic_write(out / "summary.csv", _csv([flat_summary(r) for r in results]))
    for result in results:
        rows = [
            {k: v for k, v in req.items() if k not in ("chunk_times", "chunk_tokens")}
            | {"num_chunks": len(req["chunk_times"])}
            for req in result["requests"]
        ]
        if rows:
            atomic_write(Path(result["path"]).with_suffix(".requests.csv"), _csv(rows))
    write_html(results, out)


def _num(value: float | None) -> str:
    return fmt.number(value)


def print_summary(console: Console, result: dict) -> None:
    """A rich table with a run's throughput, latency percentiles, errors and warnings."""
    s = result["summary"]
    if 0 < s["num_ok"] < MIN_P99_REQUESTS:
        console.print(
            f"[yellow]warning: {s['num_ok']} requests: the p99 below is the slowest of them, or close; "
            f"read p50, or measure {MIN_P99_REQUESTS} or more[/]"
        )
    title = f"{result['label']}: {s['num_ok']}/{s['num_requests']} ok in {s['duration_s']:.2f} s"
    if result.get("interrupted"):
        title += f" (stopped early: {result.get('stop_reason')})"
    table = Table(title=title, title_justify="left")
    table.add_column("latency (ms)")
    for stat in STATS:
        table.add_column(stat, justify="right")
    for metric in LATENCIES:
        table.add_row(metric.upper(), *(_num(s[f"{metric}_ms"][stat]) for stat in STATS))
    console.print(table)
    line = (
        f"requests {_num(s['request_rate'])}/s  output {_num(s['output_throughput'])} tok/s  "
        f"total {_num(s['total_throughput'])} tok/s"
    )
    if "goodput" in s:
        verdict = "[green]met[/]" if s["slo_met"] else "[red]missed[/]"
        line += f"  goodput {_num(s['goodput'])} req/s ({s['slo_attainment']:.0%} of requests)  SLO {verdict}"
        failed = [key for key, check in s["slo_checks"].items() if not check["met"]]
        if failed:
            line += f" ({', '.join(failed)})"
    console.print(line)
    if s["errors"]:
        console.print("[red]errors: " + ", ".join(f"{k} x{v}" for k, v in sorted(s["errors"].items())) + "[/]")
        for kind, message in sorted(s.get("error_examples", {}).items()):
            console.print(f"  first {kind}: {message}", style="red", markup=False, highlight=False)
    _print_schedule(console, s.get("schedule"))
    _print_client(console, result["client_overhead"])
    server = result["server_metrics"]
    if server.get("available"):
        parts = [
            f"{k} {server[k]:.3g}"
            for k in (
                "kv_cache_usage_max",
                "preemptions",
                "prefix_cache_hit_rate",
                "spec_decode_mean_acceptance_length",
                "spec_decode_acceptance_rate",
            )
            if k in server
        ]
        console.print("server: " + (", ".join(parts) or "/metrics has none of the known vLLM-style names"))
        hit_rate = server.get("prefix_cache_hit_rate") or 0.0
        if hit_rate > CACHED_WARN and not result["config"]["workload"].get("num_prefix_groups"):
            console.print(
                f"[yellow]warning: the server found {hit_rate:.0%} of prompt tokens in its prefix cache "
                "though the prompts share no prefix: they were probably sent before (same --seed); "
                "give another --seed to measure uncached prompts[/]"
            )
    for gpu in result["gpu"].get("gpus", []):
        figures = [
            f"{key} mean {gpu[key]['mean']:.1f} max {gpu[key]['max']:.1f}"
            for key in ("util_pct", "mem_used_gib", "power_w")
            if key in gpu
        ]
        console.print(f"gpu {gpu['index']}: " + ", ".join(figures))
    if "path" in result:
        console.print(f"saved {result['path']}")


def _print_client(console: Console, overhead: dict) -> None:
    """The client's own lag and CPU (each worker's when there are several), then its warnings."""
    workers = overhead.get("workers") or []
    line = (
        f"client: loop lag p99 {_num(overhead['loop_lag_ms']['p99'])} ms, send lag p99 "
        f"{_num(overhead['send_lag_ms']['p99'])} ms, {overhead['cpu_per_wall_s']:.2f} CPU"
    )
    if len(workers) > 1:
        line += f" in {len(workers)} workers (busiest {overhead['cpu_per_worker_max']:.2f})"
    console.print(line)
    if len(workers) > 1:
        for i, w in enumerate(workers):
            console.print(
                f"  worker {i + 1}: {w['num_requests']} requests, {w['cpu_per_wall_s']:.2f} CPU, "
                f"loop lag p99 {_num(w['loop_lag_ms']['p99'])} ms"
            )
    for warning in overhead["warnings"]:
        style = "bold yellow" if "bottleneck" in warning else "yellow"
        console.print(f"[{style}]warning: {warning}[/]")


def _print_schedule(console: Console, check: dict | None) -> None:
    """The warning of an open loop that fell behind its schedule (load.schedule_check)."""
    if not check or not check["behind"]:
        return
    parts = []
    if check["attempted_rate"] is not None:
        parts.append(
            f"requests were sent at {_num(check['attempted_rate'])} req/s, the schedule asked "
            f"{_num(check['scheduled_rate'])} req/s"
        )
    if check["num_unsent"]:
        parts.append(f"{check['num_unsent']} arrivals were never sent before --duration ended")
    if check.get("queue_wait_p99_ms"):
        parts.append(f"queue wait for a --max-concurrency slot p99 {_num(check['queue_wait_p99_ms'])} ms")
    console.print(
        f"[yellow]warning: the load fell behind its schedule: {'; '.join(parts)}: the server (or the client) "
        "could not keep up with the requested rate[/]"
    )
