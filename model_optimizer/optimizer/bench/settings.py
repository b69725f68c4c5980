"""A run's settings in words, for the report: what was sent, how hard, and from where.

`run_settings` reads a saved run (its config and plan), so reports of older run files work too;
a setting that does not apply to a run (the output length of embeddings) is None.
"""

from __future__ import annotations

from model_optimizer.optimizer.bench import fmt


def run_settings(r: dict) -> dict[str, str | None]:
    """Setting name -> its value in words, in the order a reader wants them."""
    client, workload, env = r["config"]["client"], r["config"]["workload"], r["environment"]
    generates = client["endpoint"] != "embeddings"
    return {
        "server": client["base_url"],
        "endpoint": client["endpoint"],
        "model": client["model"],
        "prompts": _prompts(workload, r.get("prompts") or {}),
        "output length": (workload["output_len"] or "128 (default)") if generates else None,
        "shared prefixes": _prefixes(workload),
        "ignore_eos": ignore_eos_words(client["ignore_eos"]) if generates else None,
        "temperature": _temperature(client["temperature"]) if generates else None,
        "seed": str(workload["seed"]),
        "load": _load(r["plan"]),
        "stop after": _stop(r["plan"]),
        "SLO": r["config"].get("slo") or "none",
        "client machine": f"{env['hostname']}, {env['client_cpus']} CPUs, Python {env['python']}, httpx {env['httpx']}",
        "client processes": str(r.get("num_workers", 1)),
        "started": r["started_at"],
    }


def stopped_early(r: dict) -> str | None:
    """`interrupted after 6 of 8 requests (SIGTERM)` for a run that ended before its plan did (a signal,
    or the fail-fast rule), None for a complete one: its figures cover only part of the load.

    Requests are those sent; the total is the run's whole schedule for an open loop or trace (sent plus
    never sent), else the plan's request count, left out when only a duration bounded the run."""
    if not r.get("interrupted"):
        return None
    num_sent = r["summary"]["num_requests"]
    schedule = r["summary"].get("schedule")
    total = num_sent + schedule["num_unsent"] if schedule else r["plan"].get("num_requests")
    count = fmt.number(num_sent) if total is None else f"{fmt.number(num_sent)} of {fmt.number(total)}"
    noun = "request" if (num_sent if total is None else total) == 1 else "requests"
    reason = r.get("stop_reason")
    return f"interrupted after {count} {noun}" + (f" ({reason})" if reason else "")


def ignore_eos_words(on: bool) -> str:
    """The ignore_eos setting and what it does to the figures: on by default, which a reader comparing
    with another tool's run must know."""
    if on:
        return "on (the default: every answer runs to its output length; --no-ignore-eos lets the model stop)"
    return "off (--no-ignore-eos: answers stop at end-of-sequence, so output lengths vary)"


def _temperature(value: float | None) -> str:
    """0 is greedy decoding, a setting of its own: only None (nothing sent) is the server's default."""
    return "server default" if value is None else f"{value:g}"


def _prompts(workload: dict, prompts: dict) -> str:
    if workload["dataset"] == "synthetic":
        text = f"synthetic, prompt length {workload['prompt_len']}"
    else:
        text = f"{workload['dataset']} file {workload.get('dataset_path')}"
    if "token_id_range" in prompts:
        low, high = prompts["token_id_range"]
        text += f"; token ids from [{low}, {high}) ({prompts.get('vocab_source', '')})"
    return text


def _prefixes(workload: dict) -> str:
    if not workload["num_prefix_groups"]:
        return "none"
    share = fmt.percent(workload["prefix_share_ratio"])
    return f"{workload['num_prefix_groups']} groups of {workload['prefix_len']} tokens, {share} of requests"


def _load(plan: dict) -> str:
    if plan["mode"] == "closed":
        text = f"closed loop, {plan['concurrency']} in flight"
    elif plan["mode"] == "trace":
        text = f"trace replay x{plan.get('trace_speedup', 1):g}"
    else:
        text = f"{plan['mode']} arrivals at {fmt.with_unit(plan['rate'], 'req/s')}"
        if plan.get("burstiness", 1.0) != 1.0:
            text += f", burstiness {plan['burstiness']:g}"
    if plan.get("max_concurrency"):
        text += f", at most {plan['max_concurrency']} in flight"
    return text


def _stop(plan: dict) -> str:
    parts = []
    if plan.get("num_requests") is not None:
        parts.append(f"{fmt.number(plan['num_requests'])} requests")
    if plan.get("duration") is not None:
        parts.append(f"{plan['duration']:g} s")
    return " or ".join(parts) or "the whole trace"
