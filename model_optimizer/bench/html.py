"""report.html: a self-contained page (PNG plots embedded) summarizing every run of a benchmark.

Plots: latency CDFs (TTFT, TPOT, ITL, E2E), TTFT over the run, and for several runs
throughput against latency. Each PNG is also saved beside the page.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from model_optimizer.bench.report import flat_summary
from model_optimizer.fileio import atomic_write

PLOT_DPI = 110


def request_latencies(result: dict) -> dict[str, list[float]]:
    """Per-request TTFT, TPOT, E2E and pooled ITL (ms) from a run's stored requests."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2e": []}
    for req in result["requests"]:
        if req["error"]:
            continue
        e2e = req["end"] - req["send"]
        out["e2e"].append(e2e * 1e3)
        if req["ttft"] is not None:
            out["ttft"].append(req["ttft"] * 1e3)
            if req["output_tokens"] > 1:
                out["tpot"].append((e2e - req["ttft"]) / (req["output_tokens"] - 1) * 1e3)
        times = req["chunk_times"]
        out["itl"].extend((b - a) * 1e3 for a, b in zip(times, times[1:]))
    return out


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI, bbox_inches="tight")
    return buf.getvalue()


def plot_cdfs(results: list[dict]) -> bytes:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, metric in zip(axes.flat, ("ttft", "tpot", "itl", "e2e")):
        for result in results:
            values = np.sort(request_latencies(result)[metric])
            if values.size:
                ax.plot(values, np.arange(1, values.size + 1) / values.size, label=result["label"])
        share = "fraction of gaps" if metric == "itl" else "fraction of requests"
        ax.set(title=f"{metric.upper()} CDF", xlabel="ms", ylabel=share)
        ax.grid(alpha=0.3)
    if axes.flat[0].get_legend_handles_labels()[0]:
        axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    return png


def plot_ttft_over_time(results: list[dict]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    for result in results:
        points = [(r["send"], r["ttft"] * 1e3) for r in result["requests"] if r["ttft"] is not None and not r["error"]]
        if points:
            xs, ys = zip(*points)
            ax.scatter(xs, ys, s=6, label=result["label"])
        failed = [r["send"] for r in result["requests"] if r["error"]]
        if failed:
            ax.scatter(failed, [0] * len(failed), marker="x", color="red", s=12)
    ax.set(title="TTFT over the run (red x: failed request)", xlabel="send time (s from run start)", ylabel="TTFT (ms)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    png = _png(fig)
    plt.close(fig)
    return png


def plot_sweep(results: list[dict]) -> bytes:
    import matplotlib.pyplot as plt

    # embeddings produce no output tokens: their throughput is requests per second
    key, unit = ("output_throughput", "output tokens/s")
    if not any(r["summary"]["output_throughput"] for r in results):
        key, unit = ("request_rate", "requests/s")
    ordered = sorted(results, key=lambda r: r["summary"][key])
    x = [r["summary"][key] for r in ordered]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, metric in zip(axes, ("ttft", "tpot", "e2e")):
        for stat in ("p50", "p99"):
            ys = [r["summary"][f"{metric}_ms"][stat] for r in ordered]
            ax.plot(x, [np.nan if y is None else y for y in ys], marker="o", label=stat)
        ax.set(title=f"{metric.upper()} vs throughput", xlabel=unit, ylabel="ms")
        ax.grid(alpha=0.3)
        ax.legend()
    png = _png(fig)
    plt.close(fig)
    return png


def write_html(results: list[dict], out: Path) -> Path:
    """Render plots and tables into out/report.html (and each plot as out/*.png)."""
    import matplotlib

    matplotlib.use("Agg")
    plots = {"latency_cdf": plot_cdfs(results), "ttft_over_time": plot_ttft_over_time(results)}
    if len(results) > 1:
        plots["throughput_vs_latency"] = plot_sweep(results)
    for name, png in plots.items():
        atomic_write(out / f"{name}.png", png)
    page = out / "report.html"
    atomic_write(page, _page(results, plots))
    return page


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape("-" if value is None else str(value))


def _page(results: list[dict], plots: dict[str, bytes]) -> str:
    rows = [flat_summary(r) for r in results]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row.get(k))}</td>" for k in keys) + "</tr>" for row in rows)
    notes = []
    for r in results:
        s = r["summary"]
        if s["errors"]:
            notes.append(f"{r['label']}: errors " + ", ".join(f"{k} x{v}" for k, v in s["errors"].items()))
        notes += [f"{r['label']}: {w}" for w in r["client_overhead"]["warnings"]]
        server = r["server_metrics"]
        if server.get("available"):
            figures = {k: server[k] for k in ("kv_cache_usage_max", "preemptions", "prefix_cache_hit_rate") if k in server}
            notes.append(f"{r['label']}: server /metrics {figures}")
        else:
            notes.append(f"{r['label']}: server /metrics not available ({server.get('reason')})")
    images = "".join(
        f'<h2>{html.escape(name.replace("_", " "))}</h2><img src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for name, png in plots.items()
    )
    note_list = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>mopt bench report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}img{max-width:100%}</style></head><body>"
        f"<h1>mopt bench report</h1><p>{len(results)} run(s); latencies in ms, rates per second.</p>"
        f"<div style='overflow-x:auto'><table><tr>{head}</tr>{body}</table></div><ul>{note_list}</ul>{images}"
        "</body></html>"
    )
