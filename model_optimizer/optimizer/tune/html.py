"""report.html of a study: the trade-offs as plots (PNG embedded), the front, every trial, the prediction error.

Plots: goodput against p99 TTFT and p99 TPOT coloured by memory; cold start against throughput;
predicted against measured TPOT and throughput; knob importance (optuna's fANOVA on goodput) once
enough trials completed.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from model_optimizer.common.fileio import atomic_write

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1.5em;color:#222}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:3px 9px;border-bottom:1px solid #e3e6ea;"
    "text-align:right}th{background:#f4f6f8}td.l,th.l{text-align:left}img{max-width:100%}"
    ".best td{background:#e6f4ea}pre{background:#f6f8fa;padding:.8em;white-space:pre-wrap;overflow-wrap:anywhere}"
    "code{font-size:12px}.note{color:#555;font-size:13px}.wide{overflow-x:auto}"
)


def write_html(output_dir: Path, summary: dict, study=None) -> Path:
    plots = render_plots(summary, study)
    page = output_dir / "report.html"
    atomic_write(page, render_page(summary, plots))
    return page


def render_plots(summary: dict, study=None) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in summary["trials"] if r["state"] == "COMPLETE"]
    plots: dict[str, bytes] = {}
    if done:
        m = [r["measured"] for r in done]
        mem = [x["memory_gib"] or 0.0 for x in m]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, key, label in ((axes[0], "ttft_p99_ms", "p99 TTFT (ms)"), (axes[1], "tpot_p99_ms", "p99 TPOT (ms)")):
            points = ax.scatter([x[key] or 0 for x in m], [x["goodput"] for x in m], c=mem, cmap="viridis")
            for r, x in zip(done, m):
                ax.annotate(str(r["number"]), (x[key] or 0, x["goodput"]), fontsize=7)
            ax.set_xlabel(label)
            ax.set_ylabel("goodput (req/s)")
        fig.colorbar(points, ax=axes, label="memory (GiB)")
        plots["goodput_vs_latency"] = _png(fig, plt)
        fig, ax = plt.subplots(figsize=(5.5, 4))
        ax.scatter([x["cold_start_s"] for x in m], [x["output_throughput"] for x in m])
        ax.set_xlabel("cold start (s, process start to ready)")
        ax.set_ylabel("output throughput (tok/s)")
        plots["cold_start_vs_throughput"] = _png(fig, plt)
    predicted = [r for r in done if r.get("predicted")]
    if predicted:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, ours, theirs, label in (
            (axes[0], "tpot_ms", "tpot_p99_ms", "TPOT (ms)"),
            (axes[1], "output_throughput", "output_throughput", "throughput (tok/s)"),
        ):
            pairs = [
                (r["measured"][theirs], r["predicted"][ours], r["number"])
                for r in predicted
                if r["measured"][theirs] and r["predicted"][ours] and r["predicted"][ours] > 0
            ]
            if not pairs:
                continue
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            ax.scatter(xs, ys)
            for x, y, number in pairs:
                ax.annotate(str(number), (x, y), fontsize=7)
            low, high = min(xs + ys) / 1.2, max(xs + ys) * 1.2
            ax.plot([low, high], [low, high], "k--", linewidth=0.8)  # predicted = measured
            ax.set_xscale("log")  # early, unfitted predictions may be off by orders of magnitude
            ax.set_yscale("log")
            ax.set_xlabel(f"measured {label}")
            ax.set_ylabel(f"predicted {label} (before the trial ran)")
        plots["predicted_vs_measured"] = _png(fig, plt)
    importance = knob_importance(study)
    if importance:
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(importance) + 1))
        names = list(importance)[::-1]
        ax.barh(names, [importance[n] for n in names])
        ax.set_xlabel("importance for goodput")
        plots["knob_importance"] = _png(fig, plt)
    return plots


def knob_importance(study) -> dict[str, float]:
    """Each searched knob's share of goodput's variance (optuna), or {} when it cannot be computed."""
    if study is None:
        return {}
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 4 or len({json.dumps(t.params, sort_keys=True) for t in done}) < 2:
        return {}  # fewer trials than optuna needs to tell knobs apart
    try:
        import warnings

        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(optuna.importance.get_param_importances(study, target=lambda t: t.values[0]))
    except Exception:  # too few trials, or one value per knob: nothing to attribute
        return {}


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _interrupted(counts: dict) -> str:
    n = counts.get("INTERRUPTED", 0)  # results.json written before the count had none
    return f", {n} interrupted (measured again on --resume)" if n else ""


def render_page(summary: dict, plots: dict[str, bytes]) -> str:
    e = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>mopt tune</title><style>{STYLE}</style>"
        "</head><body><h1>mopt tune</h1>"
    ]
    counts = summary["counts"]
    parts.append(
        f"<p>{counts['COMPLETE']} trials measured, {counts['FAIL']} failed, {counts['PRUNED']} skipped by the "
        f"predictor{_interrupted(counts)}. SLO: {e(str(summary['setup'].get('slo') or 'none'))}. Chosen for "
        f"<b>{e(summary['prefer'])}</b>.</p>"
    )
    best = summary.get("best")
    baseline = summary.get("baseline")
    if best and baseline:
        verdict = (summary.get("ranking") or {}).get("note")
        parts.append(
            f"<p>Default settings (trial {baseline['number']}): goodput {baseline['goodput']:.4g} req/s; "
            f"chosen (trial {best['number']}): {best['measured']['goodput']:.4g} req/s"
            + (f": <b>{e(verdict)}</b>" if verdict else "")
            + ".</p>"
        )
    notes = summary["setup"].get("space_notes")
    if notes:
        parts.append(f"<p class=note>The trials ran on the CPU; not searched: {e('; '.join(notes))}.</p>")
    if (summary.get("noise") or {}).get("note"):
        parts.append(f"<p>Noise: {e(summary['noise']['note'])}.</p>")
    if summary.get("predictor"):
        fit = summary["predictor"]["fit"]
        parts.append(
            "<p>Predictor (measured step ms = o_step + o_eager x g + e x roofline + flags; "
            "TTFT = a x model + b): "
            + "; ".join(f"{e(k)}: {e(_coefficients(v))}" for k, v in fit.items())
            + f"; hardware "
            f"{e(summary['predictor']['hardware']['source'])}.</p>"
        )
    if best:
        import shlex

        parts.append(
            "<h2>Recommendation</h2><pre>"
            + e(shlex.join(best["mopt_serve"]))
            + "\n\n"
            + e(shlex.join(best["vllm_serve"]))
            + "</pre>"
        )
        parts.append(_settings_table(best))
    for name, png in plots.items():
        data = base64.b64encode(png).decode()
        parts.append(f"<h2>{e(name.replace('_', ' '))}</h2><img alt='{e(name)}' src='data:image/png;base64,{data}'>")
    parts.append(_prediction_error(summary["prediction_error"]))
    parts.append(_trials_table(summary))
    return "".join(parts) + "</body></html>"


def _settings_table(best: dict) -> str:
    """Each chosen setting with its value and the exact flags it becomes for mopt serve and vllm serve."""
    from model_optimizer.optimizer.deploy.settings import flags
    from model_optimizer.optimizer.deploy.vllm_flags import vllm_serve

    e = html.escape
    rows = []
    for name, value in best["settings"].items():
        vllm_argv = vllm_serve(None, {name: value}).argv[3:]
        if name not in best["vllm_translated"]:
            vllm = f"not in vLLM: {e(best['vllm_untranslated'].get(name, 'no flag'))}"
        else:
            vllm = f"<code>{e(' '.join(vllm_argv))}</code>" if vllm_argv else "(vLLM's default)"
        ours = e(" ".join(flags({name: value}))) or "(the default)"
        rows.append(
            f"<tr><td class=l>{e(name)}</td><td class=l>{e(_text(value))}</td>"
            f"<td class=l><code>{ours}</code></td><td class=l>{vllm}</td></tr>"
        )
    head = (
        "<tr><th class=l>setting</th><th class=l>value</th><th class=l>mopt serve</th><th class=l>vllm serve</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _prediction_error(errors: dict) -> str:
    """MAPE per figure as a percentage: over every trial, and over the later half (after refits)."""
    names = {"tpot": "TPOT p99", "ttft": "TTFT p99", "throughput": "output throughput"}
    rows = "".join(
        f"<tr><td class=l>{names.get(key, key)}</td><td>{_pct(v.get('mape_pct'))}</td>"
        f"<td>{_pct(v.get('mape_last_half_pct'))}</td><td>{v.get('num_trials', 0)}</td></tr>"
        for key, v in errors.items()
    )
    return (
        "<h2>Prediction error (MAPE)</h2><p class=note>Mean absolute percentage error of the prediction made "
        "before each trial ran, against what it measured: over all measured trials, and over their later half "
        "(after the model was refitted on the first).</p><table><tr><th class=l>figure</th><th>all trials</th>"
        f"<th>later half</th><th>trials</th></tr>{rows}</table>"
    )


def _pct(value) -> str:
    return "-" if value is None else f"{value:,.1f} %"


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "-" if value is None else str(value)


def _trials_table(summary: dict) -> str:
    e = html.escape
    front, best = set(summary["pareto_front"]), (summary.get("best") or {}).get("number")
    head = [
        "trial",
        "state",
        "settings",
        "goodput",
        "TTFT p99",
        "TPOT p99",
        "memory GiB",
        "cold start s",
        "pred. TPOT",
        "pred. tok/s",
        "meas. tok/s",
        "preemptions",
        "KV max %",
        "note",
    ]
    rows = []
    varying = _varying(summary["trials"])
    for r in summary["trials"]:
        m, p = r.get("measured") or {}, r.get("predicted") or {}
        note = r.get("error") or r.get("skip_reason") or ("Pareto front" if r["number"] in front else "")
        settings = r.get("settings", {})
        cells = [
            r["number"],
            r["state"],
            "\n".join(f"{k} {_text(settings[k])}" for k in varying if k in settings) or "(as every trial)",
            m.get("goodput"),
            m.get("ttft_p99_ms"),
            m.get("tpot_p99_ms"),
            m.get("memory_gib"),
            m.get("cold_start_s"),
            p.get("tpot_ms"),
            p.get("output_throughput"),
            m.get("output_throughput"),
            *_server_figures(m),
            note,
        ]
        cls = " class=best" if r["number"] == best else ""
        rows.append(
            f"<tr{cls}>" + "".join(f"<td class=l>{e(_fmt(c)).replace(chr(10), '<br>')}</td>" for c in cells) + "</tr>"
        )
    common = _common(summary["trials"], varying)
    held = f"<p class=note>Every trial: {e(common)}.</p>" if common else ""
    return (  # many columns: on a narrow window the table scrolls in its own box, the page never does
        f"<h2>All trials</h2>{held}<div class=wide><table><tr>"
        + "".join(f"<th class=l>{h}</th>" for h in head)
        + "</tr>"
        + "".join(rows)
        + "</table></div>"
    )


def _varying(trials: list[dict]) -> list[str]:
    """Setting names whose value differs between trials, in the order the trials list them."""
    names = list(dict.fromkeys(k for r in trials for k in r.get("settings") or {}))
    return [k for k in names if len({json.dumps((r.get("settings") or {}).get(k)) for r in trials}) > 1]


def _common(trials: list[dict], varying: list[str]) -> str:
    first = next((r.get("settings") for r in trials if r.get("settings")), {}) or {}
    return ", ".join(f"{k} {_text(v)}" for k, v in first.items() if k not in varying)


def _server_figures(measured: dict) -> tuple:
    """Preemptions and the KV cache's peak use during the load, from the server's own /metrics."""
    server = measured.get("server_metrics") or {}
    preempted = (server.get("counters") or {}).get("num_preemptions_total", {}).get("delta")
    gauges = server.get("gauges") or {}
    usage = (gauges.get("kv_cache_usage_perc") or gauges.get("gpu_cache_usage_perc") or {}).get("max")
    return preempted, None if usage is None else 100.0 * usage


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _coefficients(value) -> str:
    """A fit's coefficients as text: name=value pairs (step models) or a=, b= (a line)."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v:.3g}" for k, v in value.items())
    return f"a={value[0]:.3g} b={value[1]:.3g}"
