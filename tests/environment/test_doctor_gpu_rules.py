"""Rules on the recorded GPU snapshot and on failure cases edited from it (doctor_edits.py).
Skipped until tests/environment/fixtures/h200_snapshot.json is committed."""

from __future__ import annotations

import doctor_edits as E
import pytest

from model_optimizer.environment import evaluate, exit_code, recommended_settings
from model_optimizer.environment.explain import explain


def ids(findings):
    return {f.id: f for f in findings}


def test_recorded_gpu_snapshot_is_healthy():
    snap = E.gpu_base()
    found = ids(evaluate(snap))
    assert "gpu.usable" in found and "driver.ok" in found and "cuda.compat_ok" in found
    assert not [f for f in found.values() if f.severity == "error"], [
        f.title for f in found.values() if f.severity == "error"
    ]
    assert exit_code(list(found.values())) in (0, 1)
    assert exit_code(evaluate(snap, require_gpu=True)) == exit_code(list(found.values()))


def test_recorded_gpu_snapshot_recommends_bf16_and_fp8():
    snap = E.gpu_base()
    settings = recommended_settings(snap)
    cc = E.device(snap)["compute_capability"]
    assert settings["device"] == "cuda"
    assert settings["dtype"] == ("bfloat16" if tuple(map(int, cc.split("."))) >= (8, 0) else "float16")
    assert settings["fp8_available"] == (tuple(map(int, cc.split("."))) >= (8, 9))
    assert 0.5 <= settings["gpu_memory_utilization"] <= 0.9


def test_nvidia_smi_xml_agrees_with_nvml():
    from model_optimizer.environment.probes.software import parse_nvidia_smi_xml

    snap = E.gpu_base()
    smi = E.data(snap, "nvidia_smi")
    if smi.get("rc") != 0:
        pytest.skip("nvidia-smi did not run on the recorded machine")
    parsed = parse_nvidia_smi_xml(smi["xml"])
    assert parsed["driver_version"] == E.data(snap, "nvml")["driver_version"]
    assert len(parsed["gpus"]) == E.data(snap, "nvml")["device_count"]


def test_module_missing():
    found = ids(evaluate(E.module_missing(E.gpu_base())))
    f = found["driver.module_not_loaded"]
    assert f.severity == "error" and "driver.ok" not in found and "gpu.usable" not in found
    assert any("modprobe nvidia" in c for c in f.fix_for("debian"))
    assert any("dkms" in c for c in f.fix_for("rhel"))


def test_secure_boot_with_unsigned_module():
    found = ids(evaluate(E.secure_boot_unsigned(E.gpu_base())))
    f = found["driver.secure_boot_unsigned"]
    assert f.severity == "error"
    assert "driver.module_not_loaded" not in found  # the specific cause replaces the generic one
    assert any("mokutil --import" in c for c in f.fix_for("debian"))
    assert any("mokutil --import" in c for c in f.fix_for("rhel"))


def test_signed_module_is_not_blamed_on_secure_boot():
    snap = E.secure_boot_unsigned(E.gpu_base())
    E.data(snap, "secure_boot")["nvidia_module_signer"] = "DKMS module signing key"
    found = ids(evaluate(snap))
    assert "driver.secure_boot_unsigned" not in found and "driver.module_not_loaded" in found


def test_nouveau_holds_the_card():
    found = ids(evaluate(E.nouveau_loaded(E.gpu_base())))
    f = found["driver.nouveau_loaded"]
    assert f.severity == "error" and "blacklist nouveau" in " ".join(f.fix_for("debian"))
    assert "update-initramfs" in " ".join(f.fix_for("debian")) and "dracut" in " ".join(f.fix_for("rhel"))


def test_nvidia_uvm_missing():
    found = ids(evaluate(E.uvm_missing(E.gpu_base())))
    assert found["driver.nvidia_uvm_missing"].severity == "error"
    assert "modprobe nvidia_uvm" in " ".join(found["driver.nvidia_uvm_missing"].fix_for("debian"))
    assert "cuda_unknown_error" in found["torch.cuda_unavailable"].details["knowledge_base"]


def test_driver_too_old_for_torch_cuda():
    found = ids(evaluate(E.driver_too_old(E.gpu_base())))
    f = found["cuda.driver_too_old"]
    assert f.severity == "error" and "13.0" in f.title and "525.147.05" in f.title
    assert any("nvidia-driver-580" in c for c in f.fix_for("debian"))
    # or keep the driver: torch 2.11 has no build for CUDA <= 12.0, so a 12.x one under minor-version compatibility
    assert any("download.pytorch.org/whl/cu12" in c for c in f.fix_for("debian"))
    assert found["torch.cuda_unavailable"].details["knowledge_base"][0] == "driver_insufficient"


def test_minor_version_compat_is_a_warning():
    snap = E.gpu_base()
    E.data(snap, "nvml").update({"driver_version": "570.86.15", "cuda_driver_version": 12080})
    E.data(snap, "libcuda")["cuda_driver_version"] = 12080
    E.data(snap, "torch")["cuda"] = "12.9"
    found = ids(evaluate(snap))
    assert found["cuda.minor_version_compat"].severity == "warn"
    assert "cuda.driver_too_old" not in found


def test_torch_built_without_cuda():
    found = ids(evaluate(E.torch_cpu_build(E.gpu_base())))
    f = found["torch.cpu_build"]
    assert f.severity == "error"
    assert "download.pytorch.org/whl/cu" in " ".join(f.fix_for("debian"))


def test_torch_without_kernels_for_this_gpu():
    found = ids(evaluate(E.torch_wrong_arch(E.gpu_base())))
    assert found["torch.no_kernel_image"].severity == "error"


def test_pcie_trained_down_to_x4():
    found = ids(evaluate(E.pcie_x4(E.gpu_base())))
    f = found["pcie.width_reduced"]
    assert f.severity == "warn" and "x4 of x16" in f.title
    assert exit_code(list(found.values())) >= 1


def test_laptop_gpu_at_x4_with_slow_transfers():
    found = ids(evaluate(E.laptop_x4(E.gpu_base())))
    assert "x4 of x8" in found["pcie.width_reduced"].title
    assert found["bench.h2d_pinned_low"].severity == "warn" and "39%" in found["bench.h2d_pinned_low"].title
    assert "bench.matmul_bf16_low" not in found


def test_ecc_errors():
    found = ids(evaluate(E.ecc_errors(E.gpu_base())))
    assert found["ecc.uncorrected"].severity == "error" and "3 uncorrectable" in found["ecc.uncorrected"].title
    found = ids(evaluate(E.ecc_remap_pending(E.gpu_base())))
    assert found["ecc.remap_pending"].severity == "warn" and "ecc.uncorrected" not in found


def test_power_capped():
    snap = E.power_capped(E.gpu_base())
    default = E.device(snap)["power"]["default_limit_w"]
    found = ids(evaluate(snap))
    f = found["power.capped"]
    assert f.severity == "warn" and f"-pl {default:g}" in " ".join(f.fix_for("debian"))
    assert "hw_slowdown" in found["clocks.slowdown"].title


def test_memory_held_by_others_lowers_utilization():
    snap = E.memory_in_use(E.gpu_base())
    found = ids(evaluate(snap))
    assert found["gpu.memory_in_use"].severity == "warn" and "python3" in found["gpu.memory_in_use"].title
    settings = recommended_settings(snap)
    assert settings["gpu_memory_utilization"] <= 0.37
    assert any("lowered" in n for n in settings["notes"])


@pytest.mark.parametrize(
    "cc,name,dtype,fp8",
    [
        ("7.5", "Tesla T4", "float16", False),
        ("8.0", "NVIDIA A100-SXM4-80GB", "bfloat16", False),
        ("8.9", "NVIDIA L4", "bfloat16", True),
    ],
)
def test_recommended_dtype_by_compute_capability(cc, name, dtype, fp8):
    snap = E.old_gpu(E.gpu_base(), cc, name)
    settings = recommended_settings(snap)
    assert (settings["dtype"], settings["fp8_available"]) == (dtype, fp8)
    below_triton = "gpu.below_triton_minimum" in ids(evaluate(snap))
    assert below_triton == (cc == "7.5")


def test_knowledge_base_explains_the_edited_torch_errors():
    snap = E.module_missing(E.gpu_base())
    assert explain(E.data(snap, "torch")["init_error"])[0].id == "found_no_driver"
    assert explain(E.data(snap, "nvidia_smi")["message"])[0].id == "nvidia_smi_no_driver"


def test_gpu_lost_from_the_bus():
    snap = E.gpu_base()
    E.data(snap, "nvml")["devices"].append(
        {"index": 1, "error": "NVMLError_GpuIsLost: GPU is lost", "error_type": "NVMLError_GpuIsLost"}
    )
    found = ids(evaluate(snap))
    assert found["gpu.unreachable"].severity == "error" and "GPU 1" in found["gpu.unreachable"].title
    assert not [f for f in found.values() if f.id.startswith("doctor.rule_failed")]


EDITS = [
    E.module_missing,
    E.secure_boot_unsigned,
    E.nouveau_loaded,
    E.uvm_missing,
    E.driver_too_old,
    E.torch_cpu_build,
    E.torch_wrong_arch,
    E.pcie_x4,
    E.laptop_x4,
    E.ecc_errors,
    E.ecc_remap_pending,
    E.power_capped,
    E.memory_in_use,
    E.driver_not_installed_with_secure_boot,
    E.compute_only_container,
]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__ for e in EDITS])
def test_no_rule_breaks_on_any_failure_case(edit):
    snap = edit(E.gpu_base())
    findings = evaluate(snap)
    assert not [f.title for f in findings if f.id.startswith("doctor.rule_failed")]
    assert exit_code(findings) >= 1
    recommended_settings(snap)  # never raises


def test_secure_boot_is_not_blamed_when_no_driver_is_installed():
    """modinfo finds no nvidia module: nothing for Secure Boot to refuse, so the finding is the missing driver."""
    found = ids(evaluate(E.driver_not_installed_with_secure_boot(E.gpu_base())))
    assert "driver.secure_boot_unsigned" not in found
    f = found["driver.not_installed"]
    assert f.severity == "error" and any("ubuntu-drivers install" in c for c in f.fix_for("debian"))


def test_nvml_missing_in_a_compute_only_container_is_a_warning_when_torch_uses_the_gpu():
    snap = E.compute_only_container(E.gpu_base())
    findings = evaluate(snap)
    f = ids(findings)["driver.nvml_failed"]
    assert f.severity == "warn" and "torch uses the GPU" in f.title
    assert "'compute'" in f.why and "utility" in f.why
    assert f.fix_for("debian")[0].startswith("docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ")
    assert exit_code(findings) == 1  # works, with a warning: not "GPU inference will fail"


def test_nvml_failing_while_torch_cannot_use_the_gpu_stays_an_error():
    snap = E.compute_only_container(E.gpu_base())
    E.torch_without_gpu(snap, "RuntimeError: No CUDA GPUs are available")
    assert exit_code(evaluate(snap)) == 2


def test_upgrade_recommends_a_supported_branch_that_covers_torchs_cuda():
    """CUDA 12.9 needs driver 575 and 12.8 needs 570, both branches past their end of life: the long-term
    branch 580 runs either. (A CUDA minor that needs more than 580, 13.2's 595, is test_doctor_gpu_checks'.)"""
    snap = E.driver_and_torch(E.gpu_base(), "570.133.20", 12080, "2.8.0+cu129", "12.9")
    f = ids(evaluate(snap))["cuda.minor_version_compat"]
    assert f.fix_for("debian")[0].startswith("sudo apt update && sudo apt install -y nvidia-driver-580 ")
    assert f.fix_for("rhel")[0] == "sudo dnf module install -y nvidia-driver:580-dkms"
    snap = E.driver_and_torch(E.gpu_base(), "550.127.05", 12040, "2.11.0+cu128", "12.8")
    f = ids(evaluate(snap))["cuda.minor_version_compat"]
    assert "nvidia-driver-580 " in f.fix_for("debian")[0]


def test_cpu_torch_fix_installs_the_build_closest_to_the_driver():
    """torch 2.11 has cu126/cu128/cu130; a CUDA 12.4 driver runs cu126 with the smallest gap (cu128 would
    draw doctor's minor-version warning right after its own fix)."""
    snap = E.torch_cpu_build(E.driver_and_torch(E.gpu_base(), "550.127.05", 12040, "2.11.0+cpu", None))
    f = ids(evaluate(snap))["torch.cpu_build"]
    assert f.fix_for("debian") == [
        "pip install --force-reinstall 'torch==2.11.0' --index-url https://download.pytorch.org/whl/cu126"
    ]


@pytest.mark.parametrize(
    "cc, name, torch, torch_cuda, arch_list, fix",
    [
        (  # Pascal: torch 2.11's cu128 has sm_75+ only; its cu126 has sm_50-sm_90
            "6.1",
            "Tesla P40",
            "2.11.0+cu128",
            "12.8",
            ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
            "pip install --force-reinstall 'torch==2.11.0' --index-url https://download.pytorch.org/whl/cu126   # wheels with sm_61",
        ),
        (  # Volta on 2.11: cu128 and cu130 start at sm_75
            "7.0",
            "Tesla V100-SXM2-32GB",
            "2.11.0+cu130",
            "13.0",
            ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
            "pip install --force-reinstall 'torch==2.11.0' --index-url https://download.pytorch.org/whl/cu126   # wheels with sm_70",
        ),
        (  # Blackwell on a cu126 build (no sm_100/sm_120); the 12.8 driver runs cu128, not cu130
            "12.0",
            "NVIDIA GeForce RTX 5090",
            "2.11.0+cu126",
            "12.6",
            ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
            "pip install --force-reinstall 'torch==2.11.0' --index-url https://download.pytorch.org/whl/cu128   # wheels with sm_120",
        ),
        (  # torch 2.6 has no Blackwell build at all: the index's newest torch of a variant that has it
            "12.0",
            "NVIDIA GeForce RTX 5090",
            "2.6.0+cu126",
            "12.6",
            ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
            "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128   # wheels with sm_120",
        ),
    ],
    ids=["pascal", "volta", "blackwell", "blackwell-on-2.6"],
)
def test_no_kernel_image_fix_picks_a_build_with_the_gpus_kernels(cc, name, torch, torch_cuda, arch_list, fix):
    snap = E.driver_and_torch(E.gpu_base(), "570.133.20", 12080, torch, torch_cuda)
    E.old_gpu_without_kernels(snap, cc, name, arch_list)
    f = ids(evaluate(snap))["torch.no_kernel_image"]
    assert f.fix_for("debian") == [fix]
