"""Rules over `--bench` results: each figure against the datasheet, and what a low one means."""

from __future__ import annotations

from model_optimizer.environment.findings import Finding
from model_optimizer.environment.snapshot import Snapshot

CAUSES = {
    "d2d_copy": "memory clocks held down (power cap, thermal), or another process using the GPU",
    "h2d_pinned": "the PCIe link trained narrower or slower than it can run (see the PCIe findings), or the GPU sits behind a chipset/riser",
    "d2h_pinned": "the PCIe link trained narrower or slower than it can run (see the PCIe findings), or the GPU sits behind a chipset/riser",
}


def rule_bench(snap: Snapshot) -> list[Finding]:
    """One finding per flagged measurement, and one summary."""
    bench = snap.bench
    if not bench:
        return []
    if not bench.get("ok"):
        return [Finding("bench.skipped", "ok", f"Microbenchmarks not run: {bench.get('reason')}", details=bench)]
    findings = []
    for r in bench.get("results", []):
        if r.get("error"):
            findings.append(
                Finding(f"bench.{r['name']}_failed", "warn", f"Benchmark {r['name']} failed: {r['error']}", details=r)
            )
        elif r.get("flagged"):
            cause = CAUSES.get(r["name"], "clocks held down by a power cap or heat, or other work on the GPU")
            findings.append(
                Finding(
                    f"bench.{r['name']}_low",
                    "warn",
                    f"{r['label']}: {r['value']:.1f} {r['unit']} is {r['pct_of_reference']:.0f}% of the {r['reference']:g} {r['unit']} {r['reference_kind']}",
                    f"Inference speed follows this figure. Likely cause: {cause}.",
                    {
                        "any": [
                            "nvidia-smi -q -d PERFORMANCE,POWER,PCIE,TEMPERATURE",
                            "mopt doctor --bench   # again, with nothing else running",
                        ]
                    },
                    r,
                )
            )
    summary = "; ".join(
        f"{r['label']} {r['value']:.0f} {r['unit']}"
        + (f" ({r['pct_of_reference']:.0f}%)" if r.get("pct_of_reference") else "")
        for r in bench.get("results", [])
        if r.get("value") is not None
    )
    findings.append(
        Finding(
            "bench.summary",
            "ok",
            f"Measured on GPU {bench.get('device_index', 0)}: {summary}",
            details={"device": bench.get("device")},
        )
    )
    return findings
