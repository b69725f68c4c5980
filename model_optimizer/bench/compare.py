"""`mopt bench compare a.json b.json`: two runs side by side, with B/A ratios."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from model_optimizer.bench.report import RATE_KEYS, flat_summary, load_run

HIGHER_IS_BETTER = set(RATE_KEYS) | {"slo_attainment"}
NEUTRAL = {"num_requests", "duration_s"}


def compare_rows(a: dict, b: dict) -> list[tuple[str, object, object, float | None, str]]:
    """(figure, A, B, B/A, verdict) for every numeric figure of the two runs; verdict is better/worse/same/''."""
    fa, fb = flat_summary(a), flat_summary(b)
    rows = []
    for key in fa:
        if key == "label":
            continue
        va, vb = fa.get(key), fb.get(key)
        ratio = vb / va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else None
        rows.append((key, va, vb, ratio, _verdict(key, va, vb)))
    return rows


def _verdict(key: str, va, vb) -> str:
    if key in NEUTRAL or not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
        return ""
    if abs(vb - va) <= 0.02 * max(abs(va), abs(vb)):
        return "same"
    better = vb > va if key in HIGHER_IS_BETTER else vb < va
    return "better" if better else "worse"


def print_comparison(path_a: str, path_b: str, console: Console | None = None) -> None:
    """Print the comparison table of two run files."""
    a, b = load_run(path_a), load_run(path_b)
    console = console or Console()
    table = Table(title=f"A = {a['label']} ({path_a})\nB = {b['label']} ({path_b})", title_justify="left")
    for name in ("figure", "A", "B", "B/A"):
        table.add_column(name, justify="left" if name == "figure" else "right")
    colors = {"better": "green", "worse": "red"}
    for key, va, vb, ratio, verdict in compare_rows(a, b):
        text = "-" if ratio is None else f"{ratio:.3f}"
        if verdict in colors:
            text = f"[{colors[verdict]}]{text}[/]"
        table.add_row(key, _fmt(va), _fmt(vb), text)
    console.print(table)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
