"""What the doctor claims about a GPU and its stack, on the recorded H200 snapshot and edits of it
(doctor_edits.py): bf16/fp8 by compute capability, GPUs hidden by CUDA_VISIBLE_DEVICES, a hung nvidia-smi,
the driver each CUDA release needs, the first torch to install, one JSON shape on every machine."""

from __future__ import annotations

import copy
import json
import os
import stat
import threading

import doctor_edits as E
import pytest

from model_optimizer.cli.doctor import main
from model_optimizer.environment import capture_snapshot, evaluate, exit_code, recommended_settings
from model_optimizer.environment import knowledge as K
from model_optimizer.environment.findings import Finding


def ids(findings):
    return {f.id: f for f in findings}


@pytest.mark.parametrize(
    "cc, name, dtype, fp8, tensor_cores",
    [
        ("7.0", "Tesla V100-SXM2-32GB", "float16", False, "fp16"),
        ("7.5", "Tesla T4", "float16", False, "fp16, int8"),
        ("8.0", "NVIDIA A100-SXM4-80GB", "bfloat16", False, "fp16, int8, bf16"),
        ("8.6", "NVIDIA A10", "bfloat16", False, "fp16, int8, bf16"),
        ("8.9", "NVIDIA L4", "bfloat16", True, "fp16, int8, bf16, fp8"),
        ("12.0", "NVIDIA GeForce RTX 5090", "bfloat16", True, "fp16, int8, bf16, fp8, fp4"),
    ],
)
def test_bf16_and_fp8_follow_the_compute_capability(cc, name, dtype, fp8, tensor_cores):
    """torch.cuda.is_bf16_supported() says True on Volta and Turing too (bf16 emulated without tensor cores):
    a T4 given bfloat16 runs every matmul slowly, so the compute capability decides, not torch's flag."""
    snap = E.old_gpu(E.gpu_base(), cc, name)
    E.data(snap, "torch")["bf16_supported"] = True  # what torch reports on every one of these GPUs
    settings = recommended_settings(snap)
    assert (settings["dtype"], settings["bf16_available"], settings["fp8_available"]) == (
        dtype,
        dtype == "bfloat16",
        fp8,
    )
    summary = ids(evaluate(snap))["gpu.summary"]
    assert summary.title.endswith(f"tensor cores: {tensor_cores}") and f"(sm_{cc.replace('.', '')})" in summary.title


def test_the_oldest_gpu_decides_fp8_on_a_mixed_machine():
    snap = E.gpu_base()
    a100 = copy.deepcopy(E.device(snap)) | {"index": 1, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}
    E.data(snap, "nvml")["devices"].append(a100)
    settings = recommended_settings(snap)
    assert settings["dtype"] == "bfloat16" and settings["fp8_available"] is False
    assert settings["compute_capability"] == "8.0"


def test_a_healthy_gpu_shows_what_was_checked():
    found = evaluate(E.gpu_base())
    (summary,) = [f for f in found if f.id == "gpu.summary"]
    assert summary.severity == "ok" and exit_code(found) == 0
    for text in ("NVIDIA H200 (sm_90)", "PCIe gen 5 x16 (max gen 5 x16)", "ECC on, 0 uncorrectable errors"):
        assert text in summary.title
    assert "power limit 700 W (default 700 W)" in summary.title


def test_summary_says_what_nvml_did_not_report():
    snap = E.gpu_base()
    dev = E.device(snap)
    dev["ecc"] = {"current": None, "pending": None}
    dev["pcie"] = dict.fromkeys(dev["pcie"])
    dev["power"] = dict.fromkeys(dev["power"])
    title = ids(evaluate(snap))["gpu.summary"].title
    assert "ECC not reported" in title and "PCIe link not reported" in title and "power limit not reported" in title


@pytest.mark.parametrize("value", ["", "7", "-1", "GPU-bogus", "7,0"])
def test_cuda_visible_devices_that_hides_every_gpu_is_named(value):
    found = ids(evaluate(E.cuda_visible_devices(E.gpu_base(), value)))
    f = found["torch.hidden_by_cuda_visible_devices"]
    assert f.severity == "error" and f"CUDA_VISIBLE_DEVICES={value!r}" in f.title and "NVML sees GPU 0" in f.title
    assert f.fix_for("debian")[0].startswith("unset CUDA_VISIBLE_DEVICES")
    assert f.fix_for("debian")[1].startswith("export CUDA_VISIBLE_DEVICES=0 ")
    assert "torch.cuda_unavailable" not in found  # the cause, not the symptom


@pytest.mark.parametrize("value", ["0", "0,7", "GPU-42cd3162"])
def test_cuda_visible_devices_naming_a_gpu_is_not_blamed(value):
    """The first entry names the H200 (by index, or by a prefix of its UUID): torch failing is something else."""
    found = ids(evaluate(E.cuda_visible_devices(E.gpu_base(), value)))
    assert "torch.hidden_by_cuda_visible_devices" not in found
    assert found["torch.cuda_unavailable"].details["knowledge_base"][0] == "no_device"


def test_a_hung_nvidia_smi_is_a_warning():
    """Killed at its own timeout, nvidia-smi left a probe that succeeded: no finding said it had hung."""
    findings = evaluate(E.nvidia_smi_hung(E.gpu_base()))
    f = ids(findings)["doctor.probe_timeout"]
    assert (
        f.severity == "warn" and "nvidia_smi" in f.title and "killed after 30 s" in f.details["timeouts"]["nvidia_smi"]
    )
    assert exit_code(findings) == 1


def test_the_doctor_returns_while_nvidia_smi_hangs(tmp_path, monkeypatch):
    """A stand-in nvidia-smi that blocks until the test releases it: the capture returning at all proves it
    did not wait for it."""
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec cat {fifo}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    released = threading.Thread(target=lambda: open(fifo, "w").close(), daemon=True)
    try:
        snap = capture_snapshot(["nvidia_smi"], timeout_scale=0.02)
    finally:
        released.start()  # opening the FIFO for writing waits for the stand-in; closing it lets it exit
    assert snap["probes"]["nvidia_smi"]["error_type"] == "Timeout"
    base = E.load(E.CPU_SNAPSHOT)
    base["probes"]["nvidia_smi"] = snap["probes"]["nvidia_smi"]
    assert "nvidia_smi" in ids(evaluate(base))["doctor.probe_timeout"].title


def test_driver_table_matches_nvidia_for_current_cuda_releases():
    """NVIDIA's 'CUDA Toolkit and Corresponding Driver Versions' (Linux x86_64, GA releases)."""
    expected = {"12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}
    expected |= {"13.1": "590.44.01", "13.2": "595.45.04"}
    assert {cuda: K.min_driver_for_cuda(cuda) for cuda in expected} == expected
    assert K.min_driver_minor_compat("13.2") == "580.65.06" and K.min_driver_minor_compat("12.8") == "525.60.13"


def test_torch_cu132_on_a_580_driver_asks_for_the_595_branch():
    snap = E.driver_and_torch(E.gpu_base(), "580.159.04", 13000, "2.13.0+cu132", "13.2")
    f = ids(evaluate(snap))["cuda.minor_version_compat"]
    assert f.details["min_driver_full"] == "595.45.04"
    assert f.fix_for("debian")[0].startswith("sudo apt update && sudo apt install -y nvidia-driver-595 ")
    assert f.fix_for("rhel")[0] == "sudo dnf module install -y nvidia-driver:595-dkms"


def test_torch_cu130_on_a_cuda_12_driver_is_an_error_with_both_ways_out():
    snap = E.driver_and_torch(E.gpu_base(), "575.57.08", 12090, "2.13.0+cu130", "13.0")
    f = ids(evaluate(snap))["cuda.driver_too_old"]
    assert f.severity == "error" and "needs driver >= 580.65.06" in f.title
    assert f.fix_for("debian")[0].startswith("sudo apt update && sudo apt install -y nvidia-driver-580 ")
    assert f.fix_for("debian")[-1].endswith(
        "pip install --force-reinstall 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cu126"
    )


@pytest.mark.parametrize(
    "torch, driver_cuda, build",
    [
        ("2.11.0", "12.8", "cu128"),
        ("2.12.0", "12.8", "cu126"),
        ("2.13.0", "13.2", "cu132"),
        ("2.14.0+cpu", "13.0", "cu130"),
    ],
)
def test_torch_variants_of_recent_releases(torch, driver_cuda, build):
    assert K.best_torch_build(torch, driver_cuda) == build


@pytest.mark.parametrize(
    "base, line",
    [
        (E.gpu_base, "pip install 'torch==2.13.*' --index-url https://download.pytorch.org/whl/cu130"),
        (
            lambda: copy.deepcopy(E.load(E.CPU_SNAPSHOT)),
            "pip install 'torch==2.13.*' --index-url https://download.pytorch.org/whl/cpu",
        ),
    ],
    ids=["h200", "cpu"],
)
def test_missing_torch_gets_the_exact_install_line(base, line):
    f = ids(evaluate(E.torch_missing(base())))["torch.missing"]
    assert f.severity == "error" and f.fix_for("debian")[0].startswith(line)


def test_json_document_has_one_shape_on_every_machine(tmp_path, capsys):
    """Scripts read the same keys whether the machine has a GPU, none, or a broken one."""
    shapes = []
    for snap in (E.load(E.CPU_SNAPSHOT), E.gpu_base(), E.module_missing(E.gpu_base())):
        path = tmp_path / "snap.json"
        path.write_text(json.dumps(snap))
        code = main(["--snapshot", str(path), "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert doc["schema_version"] == 1 and doc["exit_code"] == code
        assert doc["status"] == {0: "ok", 1: "warn", 2: "error"}[code]
        fields = set(Finding.__dataclass_fields__)
        assert all(set(f) == fields and f["severity"] in ("ok", "warn", "error") for f in doc["findings"])
        shapes.append((sorted(doc), sorted(doc["machine"]), sorted(doc["recommended_settings"])))
    assert shapes[0] == shapes[1] == shapes[2]
