"""The report's plots, as matplotlib figures (tests read them) and PNG bytes (the page embeds them).

Only panels with data are drawn: an embeddings run has no tokens after the first, so it gets
an E2E panel and no TTFT, TPOT or ITL ones. Each point of the latency-vs-throughput plot is
labelled with the load that produced it (`2.5 req/s`, `c=16`), so a sweep reads without the table.
"""

from __future__ import annotations

import io

import numpy as np

from model_optimizer.optimizer.bench import fmt

PLOT_DPI = 110
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


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


def load_label(result: dict) -> str:
    """The load of a run in a few characters: `c=16`, `2.5 req/s`, `trace x2`."""
    plan = result["plan"]
    if plan["mode"] == "closed":
        return f"c={plan['concurrency']}"
    if plan["mode"] == "trace":
        return f"trace x{plan.get('trace_speedup', 1):g}"
    return fmt.with_unit(plan["rate"], "req/s")


def run_name(result: dict) -> str:
    """`#03 concurrency 4`: the run number (from its file name) and label, less the endpoint name
    that starts every label unless --label replaced it."""
    path = result.get("path", "")
    number = path.rsplit("/", 1)[-1].split("-")[1] if "run-" in path else ""
    label = result["label"]
    endpoint = result.get("config", {}).get("client", {}).get("endpoint", "")
    if endpoint and label.startswith(endpoint + " "):
        label = label[len(endpoint) + 1 :]
    return f"#{number} {label}" if number else label


def cdf_figure(results: list[dict]):
    """Latency CDFs, one panel per metric that has data; None when no run has any."""
    plt = _pyplot()
    latencies = [request_latencies(r) for r in results]
    metrics = [m for m in METRIC_NAMES if any(lat[m] for lat in latencies)]
    if not metrics:
        return None
    cols = 2 if len(metrics) > 1 else 1
    rows = (len(metrics) + 1) // 2
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.5 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for result, lat in zip(results, latencies):
            values = np.sort(lat[metric])
            if values.size:
                ax.plot(values, np.arange(1, values.size + 1) / values.size, label=run_name(result))
        share = "fraction of gaps" if metric == "itl" else "fraction of requests"
        ax.set(title=f"{METRIC_NAMES[metric]} CDF", xlabel="ms", ylabel=share)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.remove()
    if len(results) <= 12:
        _legend(axes.flat[0], 7)
    fig.tight_layout()
    return fig


def ttft_over_time_figure(results: list[dict]):
    """TTFT of each request against its send time (failures as red crosses); None without TTFT data."""
    plt = _pyplot()
    if not any(r["ttft"] is not None and not r["error"] for result in results for r in result["requests"]):
        return None  # every request failed (some after their first token): nothing to plot
    fig, ax = plt.subplots(figsize=(10, 4))
    for result in results:
        points = [(r["send"], r["ttft"] * 1e3) for r in result["requests"] if r["ttft"] is not None and not r["error"]]
        if points:
            xs, ys = zip(*points)
            ax.scatter(xs, ys, s=6, label=run_name(result))
        failed = [r["send"] for r in result["requests"] if r["error"]]
        if failed:
            ax.scatter(failed, [0] * len(failed), marker="x", color="red", s=12)
    ax.set(title="TTFT over the run (red x: failed request)", xlabel="send time (s from run start)", ylabel="TTFT (ms)")
    ax.grid(alpha=0.3)
    if len(results) <= 12:
        _legend(ax, 7)
    fig.tight_layout()
    return fig


def sweep_figure(results: list[dict]):
    """p50 and p99 latency against throughput, one point per run, each labelled with its load."""
    plt = _pyplot()
    # embeddings produce no output tokens: their throughput is requests per second
    key, unit = ("output_throughput", "output tokens/s")
    if not any(r["summary"]["output_throughput"] for r in results):
        key, unit = ("request_rate", "requests/s")
    ordered = sorted(results, key=lambda r: r["summary"][key])
    metrics = [m for m in ("ttft", "tpot", "e2e") if any(r["summary"][f"{m}_ms"]["p50"] is not None for r in ordered)]
    if not metrics:
        return None
    x = [r["summary"][key] for r in ordered]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for stat in ("p50", "p99"):
            ys = [r["summary"][f"{metric}_ms"][stat] for r in ordered]
            ax.plot(x, [np.nan if y is None else y for y in ys], marker="o", label=stat)
        for xi, result in zip(x, ordered):
            y = result["summary"][f"{metric}_ms"]["p99"]
            if y is not None:
                ax.annotate(
                    load_label(result),
                    (xi, y),
                    textcoords="offset points",
                    xytext=(0, 7),
                    ha="center",
                    fontsize=7,
                    color="#444",
                )
        ax.set(title=f"{METRIC_NAMES[metric]} vs throughput", xlabel=unit, ylabel="ms")
        ax.margins(y=0.15)
        ax.grid(alpha=0.3)
        _legend(ax, 8)
    fig.tight_layout()
    return fig


def render_plots(results: list[dict]) -> dict[str, bytes]:
    """name -> PNG of every plot that has data (the sweep plot only for several runs)."""
    figures = {"latency_cdf": cdf_figure(results), "ttft_over_time": ttft_over_time_figure(results)}
    if len(results) > 1:
        figures["throughput_vs_latency"] = sweep_figure(results)
    return {name: _png(fig) for name, fig in figures.items() if fig is not None}


def _pyplot():
    """pyplot on the file-only Agg backend (no display needed, none opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _legend(ax, fontsize: int) -> None:
    """A legend when something on `ax` has a label (matplotlib warns about an empty one otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize)
