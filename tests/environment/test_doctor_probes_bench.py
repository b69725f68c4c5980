"""Probe plumbing (deadlines, failures recorded) and the microbenchmarks' code on the CPU."""

from __future__ import annotations

import threading

import doctor_edits as E
import pytest

from model_optimizer.environment import evaluate
from model_optimizer.environment._util import call_with_timeout, run_cmd
from model_optimizer.environment.bench import BenchSizes, _result, run_bench
from model_optimizer.environment.probes import capture_snapshot
from model_optimizer.environment.probes.system import os_family

TINY = BenchSizes(copy_bytes=1 << 20, transfer_bytes=1 << 20, matmul_n=64, warmup=1, samples=3, inner=2)


def test_hung_probe_times_out():
    """The probe only ends once the test lets it: returning at all proves the call did not wait for it."""
    release = threading.Event()
    try:
        result = call_with_timeout(release.wait, 0.2)
    finally:
        release.set()  # the daemon thread ends here, after the call returned
    assert result["ok"] is False and result["error_type"] == "Timeout" and result["error"] == "timed out after 0.2 s"


def test_failing_probe_is_recorded():
    def broken():
        raise RuntimeError("driver said no")

    result = call_with_timeout(broken, 5)
    assert result == {
        "ok": False,
        "error": "RuntimeError: driver said no",
        "error_type": "RuntimeError",
        "elapsed_s": result["elapsed_s"],
    }


def test_run_cmd_missing_and_timeout():
    assert run_cmd(["/nonexistent/nvidia-smi"])["found"] is False
    slow = run_cmd(["sleep", "5"], timeout_s=0.2)
    assert slow["timed_out"] is True
    ok = run_cmd(["echo", "hi"])
    assert ok["rc"] == 0 and ok["stdout"].strip() == "hi"


def test_timed_out_probe_becomes_a_warning():
    snap = E.load(E.CPU_SNAPSHOT)
    snap["probes"]["nvml"] = {"ok": False, "error": "timed out after 20 s", "error_type": "Timeout", "elapsed_s": 20.0}
    finding = {f.id: f for f in evaluate(snap)}["doctor.probe_timeout"]
    assert finding.severity == "warn" and "nvml" in finding.title


def test_capture_rejects_unknown_probe():
    with pytest.raises(ValueError, match="unknown probe"):
        capture_snapshot(["nvml", "gpu_magic"])


def test_os_family():
    assert os_family({"ID": "ubuntu", "ID_LIKE": "debian"}) == "debian"
    assert os_family({"ID": "rocky", "ID_LIKE": "rhel centos fedora"}) == "rhel"
    assert os_family({"ID": "ubuntu"}, "Linux version 5.15.153.1-microsoft-standard-WSL2") == "wsl"
    assert os_family({"ID": "arch"}) == "other"


def test_bench_code_runs_on_cpu():
    result = run_bench("cpu", sizes=TINY, fp8=True)
    by_name = {r["name"]: r for r in result["results"]}
    assert set(by_name) == {"d2d_copy", "h2d_pinned", "d2h_pinned", "matmul_bf16", "matmul_fp16", "matmul_fp8"}
    for name in ("d2d_copy", "matmul_bf16", "matmul_fp16", "matmul_fp8"):
        r = by_name[name]
        assert r.get("error") is None and r["value"] > 0 and len(r["samples_ms"]) == TINY.samples, r
    assert "CUDA" in by_name["h2d_pinned"]["error"]  # recorded, not raised
    assert by_name["d2d_copy"]["params"]["counted"] == "read + write"


def test_bench_without_fp8_skips_it():
    result = run_bench("cpu", sizes=TINY, fp8=False)
    assert "matmul_fp8" not in {r["name"] for r in result["results"]} and result["fp8_skipped"]


def test_bench_figures_against_reference():
    # 1 GB read + written in 1 ms is 2000 GB/s; against 4800 that is 41.7%: flagged
    r = _result("copy", "GB/s", 2.0, [1.0, 1.0, 3.0], 4800, "datasheet", {})
    assert r["value"] == 2000 and r["pct_of_reference"] == 41.7 and r["flagged"] is True
    r = _result("matmul", "TFLOP/s", 1.0, [1.25], 989, "datasheet", {})
    assert r["value"] == 800 and r["flagged"] is False
    assert _result("x", "GB/s", 1.0, [1.0], None, "none", {})["pct_of_reference"] is None


def test_bench_rule_summarises_and_flags():
    snap = E.load(E.CPU_SNAPSHOT)
    snap["bench"] = {
        "ok": True,
        "device_index": 0,
        "device": {"name": "NVIDIA H200"},
        "results": [
            _result("device-to-device copy", "GB/s", 2.0, [1.0], 4800, "datasheet memory bandwidth", {})
            | {"name": "d2d_copy"},
            {"name": "matmul_fp8", "label": "fp8", "error": "RuntimeError: boom"},
        ],
    }
    found = {f.id: f for f in evaluate(snap)}
    assert found["bench.d2d_copy_low"].severity == "warn" and "42%" in found["bench.d2d_copy_low"].title
    assert found["bench.matmul_fp8_failed"].severity == "warn"
    assert "2000 GB/s" in found["bench.summary"].title


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU")
def test_bench_on_the_gpu():
    result = run_bench(
        "cuda", sizes=BenchSizes(copy_bytes=64 << 20, transfer_bytes=16 << 20, matmul_n=1024, samples=3, inner=3)
    )
    by_name = {r["name"]: r for r in result["results"]}
    for r in by_name.values():
        assert r.get("error") is None and r["value"] > 0, r
    cc = result["device"]["compute_capability"]
    assert ("matmul_fp8" in by_name) == (tuple(map(int, cc.split("."))) >= (8, 9))
