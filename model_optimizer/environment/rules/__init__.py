"""Rules: each takes a Snapshot and returns findings. `evaluate` runs them all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_optimizer.environment.findings import SEVERITY_RANK, Finding
from model_optimizer.environment.rules import bench, cuda, driver, health, host
from model_optimizer.environment.snapshot import Snapshot

Rule = Callable[[Snapshot], list[Finding]]

RULES: list[Rule] = [
    host.rule_gpu_presence,
    host.rule_probe_timeouts,
    driver.rule_driver_loaded,
    driver.rule_secure_boot,
    driver.rule_nouveau,
    driver.rule_nvidia_uvm,
    driver.rule_dev_permissions,
    cuda.rule_torch_build,
    cuda.rule_cuda_compat,
    cuda.rule_torch_sees_gpu,
    cuda.rule_arch_support,
    cuda.rule_libcuda,
    cuda.rule_triton_cc,
    health.rule_unreachable_gpus,
    health.rule_gpu_summary,
    health.rule_pcie,
    health.rule_ecc,
    health.rule_power,
    health.rule_memory_in_use,
    health.rule_mig_and_mode,
    driver.rule_persistence,
    host.rule_container_toolkit,
    host.rule_packages,
    host.rule_bytecode,
    host.rule_host_resources,
    bench.rule_bench,
]


def evaluate(snapshot: dict[str, Any], require_gpu: bool = False) -> list[Finding]:
    """All findings for a snapshot, errors first. A rule that breaks becomes a warning, not a crash."""
    snap = Snapshot(snapshot)
    findings: list[Finding] = []
    for rule in RULES:
        try:
            findings.extend(rule(snap))
        except Exception as exc:  # a rule bug must not hide the other findings
            findings.append(
                Finding(
                    f"doctor.rule_failed.{rule.__name__}",
                    "warn",
                    f"Rule {rule.__name__} failed: {type(exc).__name__}: {exc}",
                    "This is a bug in mopt doctor; the other findings still hold.",
                )
            )
    if require_gpu and not snap.gpu_usable:
        findings.append(
            Finding(
                "gpu.required",
                "error",
                "--require-gpu: no GPU usable by torch",
                "The command that follows needs a CUDA GPU.",
                {"any": ["mopt doctor   # without --require-gpu, to see why"]},
            )
        )
    return sorted(findings, key=lambda f: -SEVERITY_RANK[f.severity])
