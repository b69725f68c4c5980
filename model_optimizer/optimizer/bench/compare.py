"""`mopt bench compare A B`: two runs side by side, with B/A ratios.

A and B are run files or folders of runs. Two folders are compared run by run, pairing runs
with the same load, and the runs of two sweeps step by step (the rate steps' labels hold the rates
each sweep measured, which differ); a folder holding one run stands for that run.
Comparing runs that sent different requests compares different things, so every difference
in what was sent is printed as a warning above the table.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from model_optimizer.optimizer.bench import fmt
from model_optimizer.optimizer.bench.report import RATE_KEYS, flat_summary, load_run, load_runs

HIGHER_IS_BETTER = set(RATE_KEYS) | {"slo_attainment"}
NEUTRAL = {"num_requests", "duration_s", "client_num_workers"}
WORKLOAD_KEYS = (
    "dataset",
    "dataset_path",
    "prompt_len",
    "output_len",
    "prompt_format",
    "num_prefix_groups",
    "prefix_len",
    "prefix_share_ratio",
    "trace_time_unit",
)
CLIENT_KEYS = ("endpoint", "ignore_eos", "temperature")
MEAN_TOLERANCE = 0.01
"""Relative gap between mean requested lengths that counts as a different workload."""


def compare_rows(a: dict, b: dict) -> list[tuple[str, object, object, float | None, str]]:
    """(figure, A, B, B/A, verdict) for every numeric figure of the two runs; verdict is better/worse/same/''."""
    fa, fb = flat_summary(a), flat_summary(b)
    rows = []
    for key in fa:
        if key == "label":
            continue
        va, vb = fa.get(key), fb.get(key)
        ratio = vb / va if _numeric(va) and _numeric(vb) and va else None
        rows.append((key, va, vb, ratio, _verdict(key, va, vb)))
    return rows


def _verdict(key: str, va, vb) -> str:
    if key in NEUTRAL or not _numeric(va) or not _numeric(vb):
        return ""
    if abs(vb - va) <= 0.02 * max(abs(va), abs(vb)):
        return "same"
    better = vb > va if key in HIGHER_IS_BETTER else vb < va
    return "better" if better else "worse"


def workload_differences(a: dict, b: dict) -> list[str]:
    """What differs between the requests the two runs sent (settings, and mean requested lengths)."""
    out = []
    for section, keys in (("workload", WORKLOAD_KEYS), ("client", CLIENT_KEYS)):
        sa, sb = a.get("config", {}).get(section, {}), b.get("config", {}).get(section, {})
        out += [f"{key}: A {sa.get(key)!r}, B {sb.get(key)!r}" for key in keys if sa.get(key) != sb.get(key)]
    for field, name in (("prompt_len", "prompt tokens"), ("output_len_requested", "output tokens asked")):
        ma, mb = _mean(a, field), _mean(b, field)
        if ma is not None and mb is not None and abs(ma - mb) > MEAN_TOLERANCE * max(ma, mb):
            out.append(f"mean {name} per request: A {fmt.number(ma)}, B {fmt.number(mb)}")
    return out


def _mean(run: dict, field: str) -> float | None:
    values = [r[field] for r in run.get("requests", []) if isinstance(r.get(field), (int, float))]
    return sum(values) / len(values) if values else None


def runs_at(path: str) -> list[dict]:
    """The run of a run file, or every run of a folder; ValueError when there is none."""
    if not Path(path).is_dir():
        return [load_run(path) | {"path": path}]
    runs = load_runs(path)
    if not runs:
        raise ValueError(f"{path}: the folder holds no run-NN-*.json file written by mopt bench")
    return runs


def pair_runs(runs_a: list[dict], runs_b: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs to compare: the two runs when each side has one, else runs of the same sweep step or load label."""
    if len(runs_a) == 1 and len(runs_b) == 1:
        return [(runs_a[0], runs_b[0])]
    # by sweep step where both sides recorded steps, else by label (a file written before steps were)
    by_step = all(r["plan"].get("step") is not None for r in runs_a + runs_b)
    key = load_key if by_step else _label
    by_load = {key(r): r for r in runs_b}
    pairs = [(r, by_load[key(r)]) for r in runs_a if key(r) in by_load]
    if not pairs:
        loads_a = ", ".join(sorted({r["plan"]["label"] for r in runs_a}))
        loads_b = ", ".join(sorted({r["plan"]["label"] for r in runs_b}))
        raise ValueError(
            f"no run of A has the load of a run of B (A: {loads_a}; B: {loads_b}); "
            "give two run files to compare runs of different loads"
        )
    return pairs


def load_key(run: dict) -> str:
    """What pairs a run with the other side's: its sweep step, else (outside a sweep, or a run file
    written before steps were recorded) its load label."""
    step = run["plan"].get("step")
    return _label(run) if step is None else f"sweep step {step}"


def _label(run: dict) -> str:
    return run["plan"]["label"]


def print_comparison(path_a: str, path_b: str, console: Console | None = None) -> None:
    """Print the comparison table of two runs (or of each pair of runs of two folders)."""
    console = console or Console()
    runs_a, runs_b = runs_at(path_a), runs_at(path_b)
    pairs = pair_runs(runs_a, runs_b)
    unpaired = len(runs_a) + len(runs_b) - 2 * len(pairs)
    for a, b in pairs:
        print_pair(a, b, console)
    if unpaired:
        console.print(
            f"[yellow]{unpaired} run(s) have no run of the same load (or sweep step) on the other side; not compared[/]"
        )


def print_pair(a: dict, b: dict, console: Console) -> None:
    """One table, A and B per figure with the ratio coloured by whether B is better; warnings first."""
    for difference in workload_differences(a, b):
        console.print(f"[yellow]warning: the runs sent different requests: {difference}[/]", highlight=False)
    table = Table(title=f"A = {a['label']} ({a['path']})\nB = {b['label']} ({b['path']})", title_justify="left")
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
    return fmt.number(value) if _numeric(value) or value is None else str(value)


def _numeric(value: object) -> bool:
    """A figure to divide: a number, not a flag (interrupted, behind_schedule) nor a text."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
