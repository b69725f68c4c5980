"""The doctor on this CPU-only machine: the recorded snapshot, a live capture, and the CLI."""

from __future__ import annotations

import copy
import json

import doctor_edits as E
import pytest

from model_optimizer.cli.doctor import main
from model_optimizer.environment import capture_snapshot, evaluate, exit_code, recommended_settings


def ids(findings):
    return {f.id: f for f in findings}


def test_recorded_cpu_snapshot_says_no_gpu_plainly_and_passes():
    snap = E.load(E.CPU_SNAPSHOT)
    assert snap["probes"]["nvml"]["ok"] is False  # NVML failed to start here: recorded, not raised
    assert snap["probes"]["nvml"]["error_type"] == "NVMLError_LibraryNotFound"
    findings = evaluate(snap)
    found = ids(findings)
    assert found["gpu.none"].severity == "ok" and "No NVIDIA GPU" in found["gpu.none"].title
    assert "runs on the CPU" in found["gpu.none"].why  # what still works
    assert exit_code(findings) == 0
    assert not any(f.id.startswith(("driver.", "cuda.", "torch.")) for f in findings)


def test_require_gpu_turns_no_gpu_into_an_error():
    findings = evaluate(E.load(E.CPU_SNAPSHOT), require_gpu=True)
    assert ids(findings)["gpu.required"].severity == "error"
    assert exit_code(findings) == 2


def test_cpu_recommended_settings():
    settings = recommended_settings(E.load(E.CPU_SNAPSHOT))
    assert settings["device"] == "cpu" and settings["dtype"] == "float32"
    assert settings["fp8_available"] is False and settings["gpu_memory_utilization"] is None


def test_gpu_on_the_bus_without_driver_is_an_error():
    """Same machine, but with an NVIDIA card on the PCI bus: NVML's LibraryNotFound now means 'install the driver'."""
    snap = copy.deepcopy(E.load(E.CPU_SNAPSHOT))
    E.data(snap, "pci")["sysfs_devices"] = [
        {"address": "0000:01:00.0", "device_id": "0x2684", "class": "0x030000", "driver": None}
    ]
    E.data(snap, "container_toolkit")["in_container"] = False
    found = ids(evaluate(snap))
    f = found["driver.not_installed"]
    assert f.severity == "error" and "gpu.none" not in found
    assert any("ubuntu-drivers" in c for c in f.fix_for("debian")) and any("dnf" in c for c in f.fix_for("rhel"))
    assert any("Windows" in c for c in f.fix_for("wsl"))
    E.data(snap, "container_toolkit")["in_container"] = True
    assert "driver.container_without_gpu" in ids(evaluate(snap))


def test_wsl_without_windows_driver():
    snap = copy.deepcopy(E.load(E.CPU_SNAPSHOT))
    E.data(snap, "system").update({"wsl": True, "os_family": "wsl"})
    E.data(snap, "dev_nodes")["nodes"] = {"/dev/dxg": {"read": True, "write": True}}
    assert ids(evaluate(snap))["driver.wsl_no_driver"].severity == "error"


@pytest.mark.slow
def test_live_capture_on_this_machine_never_raises():
    snap = capture_snapshot()
    assert set(snap["probes"]) >= {"nvml", "torch", "modules", "dev_nodes", "pci", "secure_boot", "system"}
    for name, result in snap["probes"].items():
        assert "ok" in result and "elapsed_s" in result, name
        assert result["ok"] or result.get("error"), name
    json.dumps(snap)  # plain JSON
    assert exit_code(evaluate(snap)) in (0, 1, 2)


def test_cli_on_cpu_snapshot_exit_codes(capsys):
    assert main(["--snapshot", E.CPU_SNAPSHOT]) == 0
    out = capsys.readouterr().out
    assert "No NVIDIA GPU found" in out and "recommended settings" in out
    assert main(["--snapshot", E.CPU_SNAPSHOT, "--require-gpu"]) == 2


def test_cli_json_document(capsys):
    assert main(["--snapshot", E.CPU_SNAPSHOT, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "ok" and doc["exit_code"] == 0
    assert doc["recommended_settings"]["device"] == "cpu"
    assert doc["machine"]["torch"] and doc["machine"]["gpus"] == []
    assert {f["id"] for f in doc["findings"]} >= {"gpu.none"}


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["--snapshot", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["--snapshot", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    bad.write_text('{"hello": 1}')
    assert main(["--snapshot", str(bad)]) == 2
    assert "not a doctor snapshot" in capsys.readouterr().err
    assert main(["--snapshot", E.CPU_SNAPSHOT, "--bench"]) == 2
    assert "cannot be combined" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_bench_without_gpu_reports_skip(tmp_path, capsys):
    saved = tmp_path / "snap.json"
    assert main(["--bench", "--json", "--save-snapshot", str(saved)]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["bench"] == {"ok": False, "reason": "no GPU usable by torch"}
    assert json.loads(saved.read_text())["bench"]["ok"] is False


def test_cli_registered_in_mopt(capsys):
    from model_optimizer.cli.main import main as mopt_main

    assert mopt_main(["doctor", "--snapshot", E.CPU_SNAPSHOT, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


@pytest.mark.parametrize(
    "family,present,absent", [("debian", "update-initramfs", "dracut"), ("rhel", "dracut", "update-initramfs")]
)
def test_report_shows_fixes_for_the_os_family(family, present, absent):
    """Rendering: the nouveau fix differs per family; only the chosen family's commands print."""
    import io

    from rich.console import Console

    from model_optimizer.environment.report import print_report, report_document

    snap = copy.deepcopy(E.load(E.CPU_SNAPSHOT))
    E.data(snap, "pci")["sysfs_devices"] = [{"address": "0000:01:00.0", "class": "0x030000", "driver": "nouveau"}]
    doc = report_document(snap, evaluate(snap), recommended_settings(snap))
    buf = io.StringIO()
    print_report(Console(file=buf, width=200), doc, family)
    text = buf.getvalue()
    assert "nouveau" in text and present in text and absent not in text
    assert "exit code 2" in text


def test_every_probe_failed_still_gives_a_report():
    snap = copy.deepcopy(E.load(E.CPU_SNAPSHOT))
    for name in snap["probes"]:
        snap["probes"][name] = {
            "ok": False,
            "error": "RuntimeError: broken",
            "error_type": "RuntimeError",
            "elapsed_s": 0.0,
        }
    findings = evaluate(snap)
    assert not [f.title for f in findings if f.id.startswith("doctor.rule_failed")]
    assert recommended_settings(snap)["device"] == "cpu"
