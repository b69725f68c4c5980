"""report.html: one self-contained page (plots embedded as PNG) for every run in an output folder.

Read top to bottom it answers: what was run (settings), how it went (a summary row per run with
the key figures), did it meet the targets (each SLO term passed or failed, goodput), what failed
and why (the first message of each error kind), what the server and GPU did, whether the client
kept up, and the plots. Figures are written for people (12,345 tok/s, 85.2 ms) and columns or
sections with no data in any run (TTFT of embeddings, GPU on a remote server) are left out.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Callable
from pathlib import Path

from model_optimizer.common.fileio import atomic_write
from model_optimizer.optimizer.bench import fmt
from model_optimizer.optimizer.bench.metrics import STATS
from model_optimizer.optimizer.bench.plots import METRIC_NAMES, render_plots, run_name
from model_optimizer.optimizer.bench.settings import run_settings, stopped_early

PLOT_TITLES = {
    "latency_cdf": "Latency distributions (CDF)",
    "ttft_over_time": "Time to first token over each run",
    "throughput_vs_latency": "Latency against throughput (each point labelled with its load)",
}
STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;max-width:1300px;
 padding:0 1.5em;color:#222;line-height:1.4}
h1{margin-bottom:.1em}h2{margin-top:1.8em;border-bottom:2px solid #e3e6ea;padding-bottom:.2em}
.sub{color:#666;margin-top:0}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}
th,td{padding:4px 10px;border-bottom:1px solid #e3e6ea;text-align:right;white-space:nowrap}
th{background:#f4f6f8;font-weight:600;white-space:normal;vertical-align:bottom}
td.l,th.l{text-align:left}td.wrap{white-space:normal;max-width:640px;text-align:left}
tr:hover td{background:#fafbfc}
.kv th{text-align:left;width:16em;vertical-align:top}.kv td{text-align:left;white-space:normal}
.pass{color:#fff;background:#1a7f37;border-radius:3px;padding:1px 7px;font-weight:600}
.fail{color:#fff;background:#cf222e;border-radius:3px;padding:1px 7px;font-weight:600}
.note{color:#666;font-size:13px}.warn{color:#9a6700}
figure{margin:1em 0}figcaption{font-weight:600;margin-bottom:.4em}img{max-width:100%}
details summary{cursor:pointer;margin:.4em 0}.scroll{overflow-x:auto}
"""


def write_html(results: list[dict], out: Path) -> Path:
    """Render plots and tables into out/report.html (and each plot as out/<name>.png)."""
    plots = render_plots(results)
    for name, png in plots.items():
        atomic_write(out / f"{name}.png", png)
    for stale in set(PLOT_TITLES) - set(plots):
        (out / f"{stale}.png").unlink(missing_ok=True)  # from an earlier report of this folder
    page = out / "report.html"
    atomic_write(page, render_page(results, plots))
    return page


def render_page(results: list[dict], plots: dict[str, bytes]) -> str:
    """The whole page as a string."""
    sections = [
        _section("settings", "Settings", settings_table(results)),
        _section("summary", "Summary", client_bound_note(results) + summary_table(results)),
        _section("slo", "Service-level objectives", slo_section(results)),
        _section("errors", "Errors", errors_table(results)),
        _section("latency", "Latency percentiles", latency_tables(results)),
        _section("server", "Server metrics (/metrics)", server_table(results)),
        _section("gpu", "GPU", gpu_table(results)),
        _section("client", "Client overhead", client_table(results)),
        _section("plots", "Plots", _plots(plots) or "<p class='note'>No successful request: nothing to plot.</p>"),
    ]
    subtitle = f"{len(results)} run(s), generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>mopt bench report</title>"
        f"<style>{STYLE}</style></head><body><h1>mopt bench report</h1><p class='sub'>{_e(subtitle)}</p>"
        + "".join(sections)
        + "</body></html>"
    )


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{_e(title)}</h2>{body}</section>" if body else ""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(header: list[str], rows: list[list[str]], left: int = 1, wrap: tuple[int, ...] = ()) -> str:
    """A table of already formatted, already escaped cells; the first `left` columns align left."""

    def cls(i: int) -> str:
        return " class='wrap'" if i in wrap else " class='l'" if i < left else ""

    head = "".join(f"<th{' class=l' if i < left else ''}>{h}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


# ---- settings -----------------------------------------------------------------------------------


def settings_table(results: list[dict]) -> str:
    """Each setting once: its value when every run shares it, else each run's value."""
    per_run = []
    for r in results:
        try:
            per_run.append(run_settings(r))
        except (KeyError, TypeError):
            per_run.append({})  # a run file from an older version without some field
    names = list(dict.fromkeys(name for settings in per_run for name in settings))
    rows = []
    for name in names:
        values = [settings.get(name, "-") for settings in per_run]
        if all(v is None for v in values):
            continue  # does not apply to these runs (output length of embeddings)
        values = ["-" if v is None else v for v in values]
        if len(set(values)) == 1:
            cell = _e(values[0])
        elif name == "started":
            cell = _e(f"{values[0]} to {values[-1]}")
        else:
            cell = "<br>".join(f"{_e(run_name(r))}: {_e(v)}" for r, v in zip(results, values))
        rows.append(f"<tr><th>{_e(name)}</th><td>{cell}</td></tr>")
    return f"<table class='kv'>{''.join(rows)}</table>"


# ---- summary ------------------------------------------------------------------------------------


def _p50_p99(metric: str) -> Callable[[dict], tuple | None]:
    def get(s: dict) -> tuple | None:
        dist = s[f"{metric}_ms"]
        return None if dist["p50"] is None else (dist["p50"], dist["p99"])

    return get


SUMMARY_COLUMNS: list[tuple[str, Callable[[dict], object], Callable[[object], str]]] = [
    ("requests ok", lambda s: f"{fmt.number(s['num_ok'])} / {fmt.number(s['num_requests'])}", str),
    ("duration", lambda s: s["duration_s"], lambda v: fmt.with_unit(v, "s")),
    ("requests/s", lambda s: s["request_rate"], fmt.number),
    ("output tok/s", lambda s: s["output_throughput"] or None, fmt.number),
    ("total tok/s", lambda s: s["total_throughput"] or None, fmt.number),
    ("goodput req/s", lambda s: s.get("goodput"), fmt.number),
] + [
    (f"{METRIC_NAMES[m]} p50 / p99 (ms)", _p50_p99(m), lambda v: f"{fmt.number(v[0])} / {fmt.number(v[1])}")
    for m in ("ttft", "tpot", "itl", "e2e")
]


def summary_table(results: list[dict]) -> str:
    """One row per run with the figures people compare; columns without data in any run are left out."""
    values = [[get(r["summary"]) for _, get, _ in SUMMARY_COLUMNS] for r in results]
    keep = [i for i in range(len(SUMMARY_COLUMNS)) if any(row[i] is not None for row in values)]
    header = ["run"] + [_e(SUMMARY_COLUMNS[i][0]) for i in keep]
    rows = [
        [_run_cell(r)] + [_e(_cell(SUMMARY_COLUMNS[i][2], row[i])) for i in keep] for r, row in zip(results, values)
    ]
    note = (
        "<p class='note'>Latencies over successful requests; rates per second of the run's duration "
        "(first send to last answer); failed requests stay in every count; an interrupted run covers "
        "only the requests it sent.</p>"
    )
    return _scroll(_table(header, rows)) + note


def _run_cell(r: dict) -> str:
    """A run's name, and under it how it stopped when it ended before its plan."""
    stopped = stopped_early(r)
    return _e(run_name(r)) + (f"<br><span class='warn'>{_e(stopped)}</span>" if stopped else "")


def _cell(format_value: Callable[[object], str], value: object) -> str:
    """A formatted figure, or a dash for a run without it (all its requests failed, an older run file)."""
    return fmt.MISSING if value is None else format_value(value)


def _scroll(table: str) -> str:
    return f"<div class='scroll'>{table}</div>"


# ---- SLOs, errors, latency details ---------------------------------------------------------------


def slo_section(results: list[dict]) -> str:
    """A row per run: each objective's measured value with PASS or FAIL, all of them, goodput, attainment."""
    judged = [r for r in results if "goodput" in r["summary"]]
    if not judged:
        return ""
    objectives = list(
        dict.fromkeys((key, c["limit_ms"]) for r in judged for key, c in r["summary"]["slo_checks"].items())
    )
    header = ["run"] + [_e(_objective(key, limit)) for key, limit in objectives]
    header += ["all objectives", "goodput", "attainment"]
    rows = []
    for r in judged:
        s = r["summary"]
        cells = [_e(run_name(r))]
        for key, limit in objectives:
            check = s["slo_checks"].get(key)
            same = check is not None and check["limit_ms"] == limit
            cells.append(f"{_e(_measured(check))} {_badge(check['met'])}" if same else "-")
        cells += [_badge(s["slo_met"]), _e(fmt.with_unit(s["goodput"], "req/s")), _e(fmt.percent(s["slo_attainment"]))]
        rows.append(cells)
    note = (
        "<p class='note'>Each objective is checked on the run over all requests, counting failed requests as "
        "infinitely slow (a p99 check passes when at most 1 % of requests failed or were over the limit; inf: "
        "failed requests reach that percentile). Goodput: requests meeting every objective, per second; "
        "attainment: their share of all requests.</p>"
    )
    return _scroll(_table(header, rows)) + note


def _measured(check: dict) -> str:
    """A check's measured value; run files store an infinite one (failed requests) as null."""
    if check["measured_ms"] is None and check.get("share_over_limit") is not None:
        return "inf"
    return fmt.ms(check["measured_ms"])


def _objective(key: str, limit_ms: float) -> str:
    metric, stat = key.split("_", 1)
    limit = f"{int(limit_ms):,}" if float(limit_ms).is_integer() else fmt.number(limit_ms)
    return f"{METRIC_NAMES.get(metric, metric)} {stat} ≤ {limit} ms"


def _badge(met: bool) -> str:
    return "<span class='pass'>PASS</span>" if met else "<span class='fail'>FAIL</span>"


def errors_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        examples = r["summary"].get("error_examples", {})
        for kind, count in sorted(r["summary"]["errors"].items()):
            rows.append([_e(run_name(r)), _e(kind), _e(fmt.number(count)), _e(examples.get(kind, "-"))])
    return _table(["run", "kind", "count", "first message"], rows, left=2, wrap=(3,)) if rows else ""


def latency_tables(results: list[dict]) -> str:
    """Every percentile of every metric with data, per run (folded when there are many runs)."""
    parts = []
    for r in results:
        s = r["summary"]
        metrics = [m for m in METRIC_NAMES if s[f"{m}_ms"]["count"]]
        if not metrics:
            continue
        rows = [
            [_e(METRIC_NAMES[m])]
            + [_e(fmt.number(s[f"{m}_ms"][stat])) for stat in STATS]
            + [_e(fmt.number(s[f"{m}_ms"]["count"]))]
            for m in metrics
        ]
        table = _table(["ms"] + list(STATS) + ["samples"], rows)
        opened = " open" if len(results) <= 2 else ""
        parts.append(f"<details{opened}><summary>{_e(run_name(r))}</summary>{table}</details>")
    return "".join(parts)


# ---- server, GPU, client ------------------------------------------------------------------------

SERVER_COLUMNS: list[tuple[str, Callable[[dict], object], Callable[[object], str]]] = [
    ("preemptions", lambda m: None if m.get("preemptions") is None else _whole(m["preemptions"]), fmt.number),
    ("prefix-cache hit rate", lambda m: m.get("prefix_cache_hit_rate"), fmt.percent),
    ("KV cache peak", lambda m: m.get("kv_cache_usage_max"), fmt.percent),
    ("spec decode: mean acceptance length", lambda m: m.get("spec_decode_mean_acceptance_length"), fmt.number),
    ("spec decode: acceptance rate", lambda m: m.get("spec_decode_acceptance_rate"), fmt.percent),
    ("prompt tokens", lambda m: _counter(m, "prompt_tokens_total"), fmt.number),
    ("generated tokens", lambda m: _counter(m, "generation_tokens_total"), fmt.number),
    ("requests done", lambda m: _counter(m, "request_success_total"), fmt.number),
    ("running (max)", lambda m: _gauge(m, "num_requests_running"), fmt.number),
    ("waiting (max)", lambda m: _gauge(m, "num_requests_waiting"), fmt.number),
]


def _counter(metrics: dict, name: str) -> float | None:
    found = metrics.get("counters", {}).get(name)
    return None if found is None else _whole(found["delta"])


def _gauge(metrics: dict, name: str) -> float | None:
    found = metrics.get("gauges", {}).get(name)
    return None if found is None else _whole(found["max"])


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def server_table(results: list[dict]) -> str:
    """The server's own counters over each run (deltas) and gauges (peaks), as a table."""
    available = [r for r in results if r["server_metrics"].get("available")]
    missing = [
        f"{_e(run_name(r))}: {_e(r['server_metrics'].get('reason', 'not available'))}"
        for r in results
        if not r["server_metrics"].get("available")
    ]
    out = ""
    if available:
        values = [[get(r["server_metrics"]) for _, get, _ in SERVER_COLUMNS] for r in available]
        keep = [i for i in range(len(SERVER_COLUMNS)) if any(row[i] is not None for row in values)]
        if keep:
            rows = [
                [_e(run_name(r))] + [_e(_cell(SERVER_COLUMNS[i][2], row[i])) for i in keep]
                for r, row in zip(available, values)
            ]
            out += _table(["run"] + [_e(SERVER_COLUMNS[i][0]) for i in keep], rows)
            out += "<p class='note'>Counters are the change over the run; running and waiting the peak seen.</p>"
        else:
            out += "<p class='note'>/metrics answered but has none of the known vLLM-style names.</p>"
    if missing:
        out += "<p class='note'>/metrics not available: " + "; ".join(missing) + "</p>"
    return out


def gpu_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        for gpu in r["gpu"].get("gpus", []) if r["gpu"].get("available") else []:
            cells = [_e(run_name(r)), _e(gpu["index"])]
            for key, unit in (("util_pct", "%"), ("mem_used_gib", "GiB"), ("power_w", "W"), ("sm_clock_mhz", "MHz")):
                figure = gpu.get(key)
                cells.append(
                    _e(f"{fmt.number(figure['mean'])} / {fmt.number(figure['max'])} {unit}") if figure else "-"
                )
            rows.append(cells)
    if not rows:
        return ""
    return (
        _table(["run", "GPU", "utilization", "memory used", "power", "SM clock"], rows, left=2)
        + "<p class='note'>mean / max over the run.</p>"
    )


def client_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        o = r["client_overhead"]
        warnings = "<br>".join(f"<span class='warn'>{_e(w)}</span>" for w in o["warnings"]) or "none"
        workers = o.get("workers") or []
        per_worker = "<br>".join(
            _e(f"{w['cpu_per_wall_s']:.2f} CPU, lag p99 {fmt.ms(w['loop_lag_ms']['p99'])}, {w['num_requests']} req")
            for w in workers
        )
        rows.append(
            [
                _e(run_name(r)),
                _e(r.get("num_workers", 1)),
                _e(fmt.ms(o["loop_lag_ms"]["p99"])),
                _e(fmt.ms(o["send_lag_ms"]["p99"])),
                _e(fmt.number(o["cpu_per_wall_s"])),
                _e(fmt.number(o.get("cpu_per_worker_max", o["cpu_per_wall_s"]))),
                per_worker if len(workers) > 1 else "-",
                warnings,
            ]
        )
    note = (
        "<p class='note'>Loop lag: how late a 10 ms timer fired in the client's event loop (the worst worker's; "
        "chunk timestamps are late by about as much); send lag: actual minus scheduled send time; CPU in cores, "
        "summed over the client's worker processes and for the busiest one (one process uses one core at most).</p>"
    )
    header = [
        "run",
        "workers",
        "loop lag p99",
        "send lag p99",
        "client CPU",
        "busiest worker",
        "each worker",
        "warnings",
    ]
    return _table(header, rows, wrap=(6, 7)) + note


def client_bound_note(results: list[dict]) -> str:
    """A warning above the summary when the client may have set the pace of some run."""
    bound = [r for r in results if r["client_overhead"].get("client_bound")]
    if not bound:
        return ""
    names = ", ".join(run_name(r) for r in bound)
    suggested = max(r["client_overhead"].get("suggested_num_workers") or 2 for r in bound)
    return (
        f"<p class='warn'><b>The client may have been the bottleneck</b> in {_e(names)}: its figures are a floor "
        f"of what the server does. Rerun with <code>--num-workers {suggested}</code> (or <code>auto</code>); "
        "see Client overhead below.</p>"
    )


def _plots(plots: dict[str, bytes]) -> str:
    return "".join(
        f"<figure id='plot-{name}'><figcaption>{_e(PLOT_TITLES.get(name, name))}</figcaption>"
        f"<img alt='{_e(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'></figure>"
        for name, png in plots.items()
    )
