"""Render an inspect report for people: a census table, the findings with their fixes, the memory plan."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

STYLE = {"ok": ("[green]ok[/]", "green"), "warn": ("[yellow]warn[/]", "yellow"), "error": ("[bold red]error[/]", "red")}
GIB = 1 << 30


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def human_count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return str(int(n))


def print_report(console: Console, doc: dict[str, Any]) -> None:
    m, census = doc["model"], doc["census"]
    total = census["total"]
    check = doc["load_check"]["as_is"]
    params = check.get("num_params") or total["params"]  # packed int4 words stand for 8 parameters each
    quantized = f" ({check['quantization']} weights)" if check.get("quantization") else ""
    console.print(
        f"[bold]mopt inspect[/] {doc['folder']} - {m['architecture']} ({m['model_type']}), {m['num_layers']} layers, "
        f"hidden {m['hidden_size']}, {human_count(params)} params{quantized}, {human_bytes(total['bytes'])} in "
        f"{census['num_files']} file(s)",
        highlight=False,
    )
    _print_census(console, census, bool(check.get("quantization")))
    _print_findings(console, doc["findings"])
    if doc.get("memory_plan"):
        print_memory_plan(console, doc["memory_plan"])
    verdict = (
        "[bold red]Errors: the engine would fail or misbehave on this checkpoint.[/]"
        if doc["exit_code"]
        else ("[yellow]Loads, with warnings.[/]" if doc["status"] == "warn" else "[green]All checks passed.[/]")
    )
    console.print(f"{verdict} (exit code {doc['exit_code']})")


def _print_census(console: Console, census: dict[str, Any], quantized: bool = False) -> None:
    dtypes = list(census["by_dtype"])
    title = (
        "stored elements (packed, scales) by module kind and dtype"
        if quantized
        else "parameters by module kind and dtype"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("kind")
    for d in dtypes:
        table.add_column(d, justify="right")
    table.add_column("bytes", justify="right")
    for kind, tally in census["by_kind"].items():
        per = census["dtypes_by_kind"].get(kind, {})
        table.add_row(kind, *[f"{per.get(d, 0):,}" if per.get(d) else "" for d in dtypes], human_bytes(tally["bytes"]))
    table.add_row(
        "[bold]total[/]",
        *[f"{census['by_dtype'][d]['params']:,}" for d in dtypes],
        human_bytes(census["total"]["bytes"]),
    )
    console.print(table)
    notes = [f"tied embeddings: {'yes' if census['tied_embeddings'] else 'no'}"]
    if census["tied_embeddings"] and census["lm_head_in_checkpoint"]:
        notes.append("an lm_head tensor is present but ignored (tied)")
    if census["quantization_config"]:
        qc = census["quantization_config"]
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else "?"
        notes.append(f"quantization_config: {method} (the whole block is in --json)")
    console.print("; ".join(notes), highlight=False)
    if census.get("experts"):
        _print_experts(console, census["experts"], census["total"]["params"])


def _print_experts(console: Console, experts: dict[str, Any], total: int) -> None:
    per_token = f", {experts['experts_per_token']} per token" if experts["experts_per_token"] else ""
    line = (
        f"experts: {experts['num_experts']} in each of {experts['num_moe_layers']} layers{per_token}, "
        f"{human_count(experts['params_per_expert'])} params each ({human_count(experts['expert_params'])} in all)"
    )
    if experts["active_params"] is not None:
        line += f"; {human_count(experts['active_params'])} of {human_count(total)} params active per token"
    console.print(line, highlight=False)
    for odd in experts["odd_experts"]:
        console.print(f"[yellow]- unlike the others: {odd}[/]", highlight=False)


def _print_findings(console: Console, findings: list[dict[str, Any]]) -> None:
    table = Table(show_header=True, header_style="bold")
    table.add_column("status", no_wrap=True)
    table.add_column("finding")
    table.add_column("id", style="dim", no_wrap=True)
    for f in findings:
        table.add_row(STYLE[f["severity"]][0], f["title"], f["id"])
    console.print(table)
    for f in findings:
        if f["severity"] == "ok":
            continue
        console.print(f"\n[{STYLE[f['severity']][1]}]■[/] [bold]{f['title']}[/]", highlight=False)
        if f.get("why"):
            console.print(f"  why: {f['why']}", highlight=False)
        for line in f.get("fix", {}).get("any", []):
            prompt = "[cyan]$[/]" if line.startswith("mopt ") else "-"
            console.print(f"  {prompt} {line}", highlight=False, soft_wrap=True)


def print_memory_plan(console: Console, plan: dict[str, Any]) -> None:
    tp = plan.get("tensor_parallel_size", 1)
    per_gpu = f" (per GPU of {tp}, tensor parallel)" if tp > 1 else ""
    table = Table(title=f"weights by format{per_gpu}", title_justify="left")
    table.add_column("format")
    table.add_column("weight bytes", justify="right")
    for fmt, size in plan["weight_bytes_by_format"].items():
        table.add_row(fmt, human_bytes(size))
    console.print(table)
    if plan.get("num_active_params") and plan["num_active_params"] != plan["num_params"]:
        console.print(
            f"parameters{per_gpu}: {human_count(plan['num_params'])} in memory, "
            f"{human_count(plan['num_active_params'])} active per token (mixture of experts)",
            highlight=False,
        )
    kv = ", ".join(f"{k}: {human_bytes(v)}" for k, v in plan["kv_bytes_per_token"].items())
    full = plan.get("full_head_kv_bytes_per_token") or {}
    if full:  # multi-head latent attention: its point is this ratio
        kv += f" (latent; full heads would take {human_bytes(full['auto'])}, {full['auto'] / plan['kv_bytes_per_token']['auto']:.1f}x)"
    console.print(f"KV cache per token{per_gpu}: {kv}", highlight=False)
    console.print(
        f"engine profile: {plan['profile_tokens']:,} tokens (min of max_num_batched_tokens and max_model_len "
        f"{plan['max_model_len']:,}); CUDA graphs about {human_bytes(plan['cuda_graph_bytes'])}, taken after the KV "
        "cache from the engine's 256 MiB headroom",
        highlight=False,
    )
    if plan.get("gpu"):
        gpu = plan["gpu"]
        table = Table(
            title=f"fits on {'each of ' + str(tp) + ' x ' if tp > 1 else ''}{gpu['name']} ({human_bytes(gpu['total_bytes'])}, {gpu['source']}) at gpu_memory_utilization "
            f"{plan['gpu_memory_utilization']}",
            title_justify="left",
        )
        for col in (
            "weights",
            "KV dtype",
            "activations",
            "KV budget",
            "blocks",
            "tokens",
            f"seqs of {plan['seq_len']}",
        ):
            table.add_column(col, justify="right")
        capped = False
        for row in plan["fits"]:
            capped |= row["capped_by_max_num_seqs"]
            table.add_row(
                row["weight_format"],
                row["kv_cache_dtype"],
                human_bytes(row["activation_bytes"]),
                human_bytes(max(row["kv_budget_bytes"], 0)),
                f"{row['num_kv_blocks']:,}",
                f"{row['num_tokens']:,}",
                f"{row['num_sequences']:,}" + ("*" if row["capped_by_max_num_seqs"] else ""),
            )
        if capped:
            table.caption = "* more than max_num_seqs: the scheduler runs at most max_num_seqs at once"
        console.print(table)
        for note in plan.get("notes", []):
            console.print(f"[dim]- {note}[/]", highlight=False)
