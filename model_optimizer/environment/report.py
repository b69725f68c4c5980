"""Render doctor results: the JSON document for machines and rich tables for people.

Every text that comes from data (titles, why, causes, fix commands, GPU names, error strings) goes
through `escape` before rich prints it: rich reads `[...]` as markup and drops it, which cut
`[signed-by=...]` out of an apt fix and `[code 999]` out of an NVML error."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from model_optimizer.environment.explain import Match
from model_optimizer.environment.findings import Finding, exit_code
from model_optimizer.environment.snapshot import Snapshot

GIB = 1 << 30
STATUS = {0: "ok", 1: "warn", 2: "error"}
STYLE = {"ok": ("[green]ok[/]", "green"), "warn": ("[yellow]warn[/]", "yellow"), "error": ("[bold red]error[/]", "red")}


def machine_summary(snap: Snapshot) -> dict[str, Any]:
    """The few facts that identify the machine a result came from."""
    system = snap.data("system")
    return {
        "os": (system.get("os_release") or {}).get("PRETTY_NAME"),
        "os_family": snap.os_family,
        "kernel": system.get("kernel"),
        "cpu": (system.get("cpu") or {}).get("model"),
        "cpu_cores": (system.get("cpu") or {}).get("usable_cores"),
        "ram_gib": round((system.get("memory") or {}).get("total_bytes", 0) / GIB, 1),
        "gpus": [d.get("name") for d in snap.devices] or [d.get("name") for d in snap.torch.get("devices") or []],
        "driver_version": snap.driver_version,
        "driver_cuda": snap.driver_cuda,
        "torch": snap.torch.get("version"),
        "torch_cuda": snap.torch.get("cuda"),
        "captured_at": snap.raw.get("captured_at"),
    }


def report_document(snapshot: dict[str, Any], findings: list[Finding], settings: dict[str, Any]) -> dict[str, Any]:
    """What `mopt doctor --json` prints."""
    snap = Snapshot(snapshot)
    code = exit_code(findings)
    return {
        "schema_version": 1,
        "status": STATUS[code],
        "exit_code": code,
        "machine": machine_summary(snap),
        "findings": [f.to_dict() for f in findings],
        "recommended_settings": settings,
        "bench": snapshot.get("bench"),
    }


def print_report(console: Console, doc: dict[str, Any], os_family: str) -> None:
    """Findings table, fixes for the OS family, recommended settings, benchmark table."""
    m = doc["machine"]
    gpus = ", ".join(filter(None, m["gpus"])) or "no NVIDIA GPU"
    line = (
        f"{gpus} | driver {m['driver_version'] or '-'} (CUDA {m['driver_cuda'] or '-'}) | "
        f"torch {m['torch'] or '-'} (CUDA {m['torch_cuda'] or '-'}) | {m['os'] or '?'}"
    )
    console.print(f"[bold]mopt doctor[/] - {escape(line)}")
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("status", no_wrap=True)
    table.add_column("finding")
    table.add_column("id", style="dim", no_wrap=True)
    for f in doc["findings"]:
        table.add_row(STYLE[f["severity"]][0], escape(f["title"]), escape(f["id"]))
    console.print(table)
    _print_fixes(console, doc["findings"], os_family)
    _print_settings(console, doc["recommended_settings"])
    if doc.get("bench"):
        _print_bench(console, doc["bench"])
    verdict = {
        0: "[green]All checks passed.[/]",
        1: "[yellow]Works, with warnings.[/]",
        2: "[bold red]Errors: GPU inference will fail until they are fixed.[/]",
    }
    console.print(f"{verdict[doc['exit_code']]} (exit code {doc['exit_code']})")


def _print_fixes(console: Console, findings: list[dict[str, Any]], os_family: str) -> None:
    todo = [f for f in findings if f["severity"] != "ok"]
    shown_os = "all" if os_family == "all" else os_family
    for f in todo:
        console.print(f"\n[{STYLE[f['severity']][1]}]■[/] [bold]{escape(f['title'])}[/]")
        if f.get("why"):
            console.print(f"  why: {escape(f['why'])}", highlight=False)
        fix = f.get("fix") or {}
        families = ["any", "debian", "rhel", "wsl"] if shown_os in ("all", "other") else ["any", shown_os]
        for family in families:
            for cmd in fix.get(family, []):
                tag = "" if family == "any" or shown_os not in ("all", "other") else f"[dim]({family})[/] "
                console.print(f"  {tag}{_prompt(cmd)} {escape(cmd)}", highlight=False, soft_wrap=True)
    for f in findings:
        if f["severity"] == "ok" and f["id"] == "gpu.none":
            console.print(f"\n[bold]No GPU.[/] {escape(f['why'])}", highlight=False)


def _print_settings(console: Console, settings: dict[str, Any]) -> None:
    table = Table(title="recommended settings", show_header=False, title_justify="left")
    for key in (
        "device",
        "dtype",
        "kv_cache_dtype",
        "fp8_available",
        "num_threads",
        "gpu_memory_utilization",
        "gpu_memory_free_gib",
        "compute_capability",
    ):
        if settings.get(key) is not None:
            table.add_row(key, escape(str(settings[key])))
    for note in settings.get("notes", []):
        table.add_row("note", escape(note))
    console.print(table)


def _print_bench(console: Console, bench: dict[str, Any]) -> None:
    if not bench.get("ok"):
        console.print(f"[dim]bench: {escape(str(bench.get('reason')))}[/]")
        return
    table = Table(
        title=escape(
            f"microbenchmarks on {bench['device'].get('name')} (datasheet: {bench.get('datasheet') or 'unknown'})"
        ),
        title_justify="left",
    )
    for col in ("benchmark", "measured", "reference", "% of reference"):
        table.add_column(col, justify="right" if col != "benchmark" else "left")
    for r in bench["results"]:
        if r.get("error"):
            table.add_row(escape(r["label"]), f"[red]{escape(r['error'])}[/]", "", "")
            continue
        pct = "-" if r["pct_of_reference"] is None else f"{r['pct_of_reference']:.0f}%"
        pct = f"[yellow]{pct} (low)[/]" if r["flagged"] else pct
        ref = "-" if r["reference"] is None else f"{r['reference']:g} ({r['reference_kind']})"
        table.add_row(escape(r["label"]), escape(f"{r['value']:.1f} {r['unit']}"), escape(ref), pct)
    console.print(table)


def print_explain(console: Console, text: str, matches: list[Match], os_family: str) -> None:
    """The knowledge-base entries that fit an error message."""
    if not matches:
        console.print("No knowledge-base entry matches this text. Run `mopt doctor` to check the machine itself.")
        return
    for i, m in enumerate(matches):
        console.print(
            f"\n[bold]{'Most likely' if i == 0 else 'Also matches'}: {escape(m.title)}[/] "
            f"[dim]({escape(m.id)}; matched: {escape(', '.join(repr(x) for x in m.matched))})[/]",
            highlight=False,
        )
        console.print("  causes:")
        for c in m.causes:
            console.print(f"   - {escape(c)}", highlight=False)
        console.print("  fix:")
        families = ["any", "debian", "rhel", "wsl"] if os_family in ("all", "other") else ["any", os_family]
        for family in families:
            for cmd in m.fix.get(family, []):
                tag = f"[dim]({family})[/] " if family != "any" and os_family in ("all", "other") else ""
                console.print(f"   {tag}{_prompt(cmd)} {escape(cmd)}", highlight=False, soft_wrap=True)


def _prompt(line: str) -> str:
    """'$' before a command, '-' before advice in words (a capitalised first word that is no VAR=value)."""
    first = line.split(" ", 1)[0]
    return "-" if first[:1].isupper() and "=" not in first else "[cyan]$[/]"
