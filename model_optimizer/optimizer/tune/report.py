"""What a study leaves behind: results.json, the Pareto table, best.yaml, the commands, report.html.

Everything is rebuilt from the study's SQLite file (each trial's settings, prediction and
measurements are stored on it), so a resumed or interrupted study reports every trial it holds.
Files are written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from model_optimizer.common.fileio import atomic_write
from model_optimizer.optimizer.tune.commands import mopt_serve_argv, vllm_serve
from model_optimizer.optimizer.tune.folder import json_text
from model_optimizer.optimizer.tune.noise import noise_summary, ranking
from model_optimizer.optimizer.tune.pareto import choose, feasible, pareto_front
from model_optimizer.optimizer.tune.predictor import mape

SCHEMA = "mopt-tune/1"


def study_rows(study) -> list[dict]:
    """One dict per trial: number, state, settings, prediction, measurements, error or skip reason."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        row = {"number": t.number, **t.user_attrs, "state": t.state.name}
        if t.values is not None:
            row["values"] = list(t.values)
        rows.append(row)
    return rows


def prediction_errors(rows: list[dict]) -> dict:
    """MAPE of the prediction made before each measured trial (corrected by the trials before it)."""
    pairs = {
        "tpot": ("tpot_ms", "tpot_p99_ms"),
        "ttft": ("ttft_ms", "ttft_p99_ms"),
        "throughput": ("output_throughput", "output_throughput"),
    }
    measured = [r for r in rows if r["state"] == "COMPLETE" and r.get("predicted")]
    out = {}
    for key, (ours, theirs) in pairs.items():
        all_pairs = [(r["predicted"][ours], r["measured"][theirs]) for r in measured]
        half = all_pairs[len(all_pairs) // 2 :]  # after the refit has seen some trials
        out[key] = {"mape_pct": mape(all_pairs), "mape_last_half_pct": mape(half), "num_trials": len(all_pairs)}
    return out


def build_summary(rows: list[dict], prefer: str, model: str | None, setup: dict) -> dict:
    front = pareto_front(rows)
    best = choose(front, prefer)
    # an interrupted trial (FAIL in the file, resume.is_interrupted) measured nothing: not one of the failures
    interrupted = sum(r["state"] == "FAIL" and str(r.get("error", "")).startswith("interrupted") for r in rows)
    counts = {s: sum(r["state"] == s for r in rows) for s in ("COMPLETE", "FAIL", "PRUNED")}
    counts["FAIL"] -= interrupted
    counts["INTERRUPTED"] = interrupted
    summary = {
        "schema": SCHEMA,
        "setup": setup,
        "counts": counts,
        "prefer": prefer,
        "pareto_front": [r["number"] for r in front],
        "best": None,
        "prediction_error": prediction_errors(rows),
        "trials": rows,
    }
    baseline = next((r for r in rows if r.get("baseline") and r["state"] == "COMPLETE"), None)
    if baseline:
        summary["baseline"] = {"number": baseline["number"], "goodput": baseline["measured"]["goodput"]}
    summary["noise"] = noise_summary(rows, best)
    summary["ranking"] = ranking(rows, best)
    if best:
        vllm = vllm_serve(model, best["settings"])
        summary["best"] = {
            "number": best["number"],
            "settings": best["settings"],
            "measured": best["measured"],
            "mopt_serve": mopt_serve_argv(model, best["settings"]),
            "vllm_serve": vllm.argv,
            "vllm_translated": vllm.translated,
            "vllm_untranslated": vllm.untranslated,
        }
    return summary


def write_outputs(output_dir: Path, summary: dict, study=None) -> None:
    """results.json, best.yaml, commands.txt and report.html in `output_dir`."""
    atomic_write(output_dir / "results.json", json_text(summary))
    best = summary["best"]
    if best:
        atomic_write(output_dir / "best.yaml", best_yaml(summary))
        atomic_write(output_dir / "commands.txt", commands_text(best))
    from model_optimizer.optimizer.tune.html import write_html

    write_html(output_dir, summary, study)


def best_yaml(summary: dict) -> str:
    """The chosen settings under `mopt serve` flag names: `mopt serve --config best.yaml` runs them."""
    import yaml

    best = summary["best"]
    m = best["measured"]
    slo = summary["setup"].get("slo")
    missed = (
        f"# no trial met the SLO ({slo}): these settings are the best of trials that all missed it\n"
        if slo and not any(feasible(r) for r in summary["trials"])
        else ""
    )
    header = (
        f"# mopt tune: trial {best['number']}, chosen for {summary['prefer']} from the Pareto front\n"
        + missed
        + f"# measured: goodput {_n(m['goodput'])} req/s, p99 TTFT {_n(m['ttft_p99_ms'])} ms, "
        f"p99 TPOT {_n(m['tpot_p99_ms'])} ms, memory {_n(m['memory_gib'])} GiB, cold start "
        f"{_n(m['cold_start_s'])} s\n# against the defaults: {(summary.get('ranking') or {}).get('note', '-')}\n"
        "# run it: mopt serve --config best.yaml\n"
    )
    settings = {k: v for k, v in best["settings"].items() if v is not None}
    model = summary["setup"].get("model")
    if model:
        settings = {"model": model, **settings}
    return header + yaml.safe_dump(settings, sort_keys=False)


def commands_text(best: dict) -> str:
    import shlex

    lines = [
        "# mopt serve",
        shlex.join(best["mopt_serve"]),
        "",
        "# vllm serve (equivalent where vLLM has the flag)",
        shlex.join(best["vllm_serve"]),
        "",
        "# setting -> vLLM flag",
    ]
    lines += [f"{k:<28} {v}" for k, v in best["vllm_translated"].items()]
    if best["vllm_untranslated"]:
        lines += ["", "# not expressible in vLLM"]
        lines += [f"{k:<28} {v}" for k, v in best["vllm_untranslated"].items()]
    return "\n".join(lines) + "\n"


def pareto_table(summary: dict):
    """A rich Table of the Pareto front."""
    from rich.table import Table

    table = Table(title="Pareto front (measured)")
    front = set(summary["pareto_front"])
    rows = [r for r in summary["trials"] if r["number"] in front]
    knobs = sorted({k for r in rows for k in r.get("settings", {}) if _varies(summary["trials"], k)})
    for col in ["trial", *knobs, "goodput req/s", "TTFT p99 ms", "TPOT p99 ms", "memory GiB", "cold start s", "SLO"]:
        table.add_column(col, justify="right", overflow="fold")  # fold long knob names, never cut them
    best = (summary.get("best") or {}).get("number")
    for r in rows:
        m = r["measured"]
        slo = "" if m.get("slo_met") is None else ("met" if m["slo_met"] else "missed")
        mark = "*" if r["number"] == best else ""
        table.add_row(
            f"{r['number']}{mark}",
            *[str(r["settings"].get(k)) for k in knobs],
            _n(m["goodput"]),
            _n(m["ttft_p99_ms"]),
            _n(m["tpot_p99_ms"]),
            _n(m["memory_gib"]),
            _n(m["cold_start_s"]),
            slo,
        )
    return table


def _varies(rows: list[dict], key: str) -> bool:
    return len({json.dumps(r.get("settings", {}).get(key)) for r in rows if r.get("settings")}) > 1


def _n(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
