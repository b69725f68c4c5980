"""The rich renderable of a View: one panel with the server's state, latencies, errors and GPUs."""

from __future__ import annotations

import time

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from model_optimizer.optimizer.top.view import View

LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "queue": "queue"}
HEADLINES = {
    "unreachable": "unreachable",
    "http_error": "error answer",
    "not_metrics": "not Prometheus text",
    "no_engine_metrics": "no engine metrics",
}
"""The first words of a view with no numbers, by its state: a server that answers is not "unreachable"."""


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def render(view: View, retry_s: float | None = None) -> Panel:
    """The panel of `view`; `retry_s`: the seconds to the next scrape, promised on a failed one (None: no more)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(view.taken_at))
    if not view.ok:
        body = Text.assemble((HEADLINES[view.state], "bold red"), f"  {view.error}")
        if retry_s is not None:
            body.append(f"\nretrying every {retry_s:g} s ...")
        return Panel(body, title=escape(f"mopt top  {view.url}"), subtitle=stamp, border_style="red")
    state = Table.grid(padding=(0, 2))
    for _ in range(4):
        state.add_column()
    state.add_row("running", _num(view.running), "waiting", _num(view.waiting))
    state.add_row("requests/s", _num(view.request_rate, "{:,.2f}"), "KV cache", _pct(view.kv_cache_usage))
    state.add_row(
        "prompt tok/s",
        _num(view.prompt_tokens_per_s, "{:,.1f}"),
        "gen tok/s",
        _num(view.generation_tokens_per_s, "{:,.1f}"),
    )
    state.add_row(
        "prefix hits",
        _pct(view.prefix_hit_rate),
        "preemptions",
        f"{_num(view.preemptions)} (+{_num(view.preemptions_in_window)})",
    )
    latency = Table(title="latency", title_justify="left", box=None, padding=(0, 2))
    for column in ("", "p50", "p99", "mean", "over"):
        latency.add_column(column, justify="right" if column else "left")
    for key, name in LATENCY_NAMES.items():
        row = view.latency.get(key)
        if row:
            over = "window" if row["window"] else "all time"
            latency.add_row(name, _ms(row["p50"]), _ms(row["p99"]), _ms(row.get("mean")), over)
    parts: list = [state, Text(""), latency]
    if view.errors_by_status:
        errors = ", ".join(f"{status}: {count:,.0f}" for status, count in sorted(view.errors_by_status.items()))
        parts += [Text(""), Text.assemble(("errors ", "bold"), errors)]
    if view.num_malformed_samples:
        parts += [Text(""), Text(f"skipped {view.num_malformed_samples} malformed samples", style="yellow")]
    for gpu in view.gpus:
        parts.append(
            Text(
                f"GPU {gpu['index']}  util {gpu['utilization']}%  mem {gpu['memory_used'] / 2**30:.1f}/"
                f"{gpu['memory_total'] / 2**30:.1f} GiB  {gpu['power_w']:.0f} W  {gpu['temperature_c']} C"
            )
        )
    models = ", ".join(view.models) or "?"
    window = f"window {view.window_s:.1f} s" if view.window_s else "first scrape"
    return Panel(
        Group(*parts),
        title=escape(f"mopt top  {view.url}  [{models}]"),
        subtitle=f"{stamp}  {window}",
        border_style="green",
    )


def plain_line(view: View) -> str:
    """One line of the view for a pipe or a log file: the time, the state, rates and p99 latencies (those of
    the window as ttft_p99=..., the all-time ones the panel marks "all time" as ttft_p99_all_time=...)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(view.taken_at))
    if not view.ok:
        return f"{stamp} {HEADLINES[view.state]}: {view.error}"
    parts = [
        stamp,
        f"running={_num(view.running)}",
        f"waiting={_num(view.waiting)}",
        f"requests/s={_num(view.request_rate, '{:.2f}')}",
        f"kv_cache={_pct(view.kv_cache_usage)}",
        f"prompt_tok/s={_num(view.prompt_tokens_per_s, '{:.1f}')}",
        f"gen_tok/s={_num(view.generation_tokens_per_s, '{:.1f}')}",
        f"prefix_hits={_pct(view.prefix_hit_rate)}",
        f"preemptions={_num(view.preemptions)}",
    ]
    for key, row in view.latency.items():  # named apart when nothing finished in the window: not this scrape's
        name = f"{key}_p99" if row["window"] else f"{key}_p99_all_time"
        parts.append(f"{name}={_ms(row['p99']).replace(' ', '')}")
    if view.errors_by_status:
        parts.append("errors=" + ",".join(f"{s}:{c:.0f}" for s, c in sorted(view.errors_by_status.items())))
    if view.num_malformed_samples:
        parts.append(f"malformed={view.num_malformed_samples}")
    return " ".join(parts)
