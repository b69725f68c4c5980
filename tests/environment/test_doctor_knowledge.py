"""The error knowledge base (every entry matched by its own messages) and the data files."""

from __future__ import annotations

import json
import re

import pytest

from model_optimizer.cli.doctor import main
from model_optimizer.environment import knowledge as K
from model_optimizer.environment.explain import entries, explain

ENTRIES = entries()


def test_knowledge_base_has_the_common_errors():
    have = {e["id"] for e in ENTRIES}
    required = {
        "nvidia_smi_no_driver",
        "driver_insufficient",
        "no_kernel_image",
        "no_device",
        "cuda_oom",
        "nccl_error",
        "libcuda_missing",
        "cudnn_mismatch",
        "found_no_driver",
        "nvidia_container_cli",
        "container_no_gpu_runtime",
        "xid",
        "cublas_not_initialized",
        "bf16_unsupported",
    }
    assert required <= have
    assert len(have) == len(ENTRIES) >= 12  # ids are unique


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_is_complete(entry):
    assert entry["title"] and entry["causes"] and entry["examples"]
    assert entry["fix"] and set(entry["fix"]) <= {"any", "debian", "rhel", "wsl"}
    assert all(isinstance(c, str) and c for cmds in entry["fix"].values() for c in cmds)
    for pattern in entry["patterns"]:
        re.compile(pattern)


@pytest.mark.parametrize(
    "entry,example",
    [(e, x) for e in ENTRIES for x in e["examples"]],
    ids=[f"{e['id']}-{i}" for e in ENTRIES for i in range(len(e["examples"]))],
)
def test_every_entry_is_found_first_by_its_message(entry, example):
    matches = explain(example)
    assert matches and matches[0].id == entry["id"], [m.id for m in matches]
    assert matches[0].matched


@pytest.mark.parametrize(
    "text,expected",
    [
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "nvidia_smi_no_driver"),
        ("CUDA driver version is insufficient for CUDA runtime version", "driver_insufficient"),
        ("no kernel image is available for execution on the device", "no_kernel_image"),
        ("cuInit: CUDA_ERROR_NO_DEVICE", "no_device"),
        ("CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
    ],
)
def test_the_issue_examples(text, expected):
    assert explain(text)[0].id == expected


def test_unrelated_text_matches_nothing():
    assert explain("ModuleNotFoundError: No module named 'yaml'") == []


def test_empty_text_is_a_clear_error():
    with pytest.raises(ValueError, match="needs the error text"):
        explain("   ")


def test_cli_explain(capsys):
    assert (
        main(
            [
                "--explain",
                "RuntimeError: CUDA error: no kernel image is available for execution on the device",
                "--os",
                "all",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Most likely" in out and "TORCH_CUDA_ARCH_LIST" in out
    assert main(["--explain", "CUBLAS_STATUS_NOT_INITIALIZED", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matches"][0]["id"] == "cublas_not_initialized"
    assert main(["--explain", "all good here"]) == 1
    assert "No knowledge-base entry" in capsys.readouterr().out


def test_an_entry_id_the_output_names_explains_that_entry(capsys):
    for entry in entries():
        (match,) = explain(f" {entry['id']}\n")
        assert match.id == entry["id"] and match.matched == [entry["id"]]
    assert main(["--explain", "cuda_oom", "--os", "all"]) == 0
    assert "(cuda_oom; matched: 'cuda_oom')" in capsys.readouterr().out
    assert explain("cuda_oomx") == []  # an id only as the whole text


def test_cli_explain_reads_stdin(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("torch.OutOfMemoryError: CUDA out of memory."))
    assert main(["--explain", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matches"][0]["id"] == "cuda_oom"


def test_driver_requirements():
    assert K.min_driver_for_cuda("12.4") == "550.54.14"
    assert K.min_driver_for_cuda("12.7") == "560.28.03"  # no 12.7 release: the one before applies
    assert K.min_driver_for_cuda("13.0") == "580.65.06"
    assert K.min_driver_minor_compat("12.8") == "525.60.13"
    assert K.min_driver_minor_compat("13.0") == "580.65.06"
    assert K.cuda_from_int(12040) == "12.4" and K.cuda_from_int(13000) == "13.0"
    assert K.version_tuple("570.86.15") > K.version_tuple("570.26")


def test_compute_capability_features():
    assert "bf16" not in K.cc_features("7.5")
    assert "bf16" in K.cc_features("8.0") and "fp8" not in K.cc_features("8.6")
    assert {"bf16", "fp8"} <= set(K.cc_features("8.9")) and "hopper" not in K.cc_features("8.9")
    assert {"bf16", "fp8", "hopper"} <= set(K.cc_features("9.0")) and "fp4" not in K.cc_features("9.0")
    assert "fp4" in K.cc_features("10.0")
    assert K.cc_at_least("10.0", "8.9") and not K.cc_at_least(None, "7.0")


@pytest.mark.parametrize(
    "name,spec",
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "GeForce RTX 4060 Laptop GPU"),
        ("Tesla T4", "T4"),
    ],
)
def test_datasheet_lookup(name, spec):
    entry = K.gpu_spec(name)
    assert entry and entry["name"] == spec
    assert entry["memory_bandwidth_gbps"] > 0 and entry["tflops"].get("fp16", 0) > 0
    assert ("fp8" in entry["tflops"]) == K.cc_at_least(entry["compute_capability"], "8.9")
    assert ("bf16" in entry["tflops"]) == K.cc_at_least(entry["compute_capability"], "8.0")


def test_unknown_gpu_has_no_datasheet():
    assert K.gpu_spec("NVIDIA GeForce GTX 1080") is None and K.gpu_spec(None) is None


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e", "NVIDIA GB200"])
def test_superchips_are_not_taken_for_the_discrete_gpu_in_their_name(name):
    """GH200 is no H200 SXM (other memory, an NVLink-C2C host link compared to PCIe): no entry until its
    datasheet figures are added."""
    assert K.gpu_spec(name) is None


def test_pcie_and_torch_builds():
    assert K.pcie_gbps(5, 16) == pytest.approx(63.0, rel=0.01)
    assert K.pcie_gbps(4, 8) == pytest.approx(15.75, rel=0.01)
    assert K.pcie_gbps(None, 16) is None
    assert K.best_torch_build("2.11.0+cu130", "13.0") == "cu130"
    assert K.best_torch_build("2.11.0", "12.8") == "cu128"
    # same major under minor-version compatibility: the closest to the driver, not the newest
    assert K.best_torch_build("2.11.0", "12.4") == "cu126"
    assert K.best_torch_build("2.11.0", "12.0") == "cu126"
    assert K.best_torch_build("2.11.0", "11.8") is None
    assert K.best_torch_build("2.6.0", "12.4") == "cu124"
    # 2.12 and 2.13 dropped cu128 and added cu132: a 12.8 driver gets cu126, a 13.1 driver cu130
    assert K.best_torch_build("2.13.0", "12.8") == "cu126"
    assert K.best_torch_build("2.13.0+cpu", "13.1") == "cu130"
    assert K.best_torch_build("2.12.1", "13.2") == "cu132"


def test_which_torch_builds_have_kernels_for_a_gpu():
    assert K.build_has_kernels("cu126", "6.1") and not K.build_has_kernels("cu128", "6.1")
    assert K.build_has_kernels("cu126", "8.9") and not K.build_has_kernels("cu126", "12.0")
    assert K.build_has_kernels("cu128", "12.1") and K.build_has_kernels("cu130", "10.3")
    assert not K.build_has_kernels("cu130", "7.0") and not K.build_has_kernels("cu126", "3.7")
    assert not K.build_has_kernels("cu999", "9.0")
    assert K.torch_build_for_gpu("2.11.0+cu128", "6.1", "12.8") == ("cu126", True)
    assert K.torch_build_for_gpu("2.11.0", "12.0", "13.0") == ("cu130", True)
    assert K.torch_build_for_gpu("2.11.0", "12.0", "12.4") == ("cu128", True)  # minor-version compatibility
    assert K.torch_build_for_gpu("2.5.1", "12.0", "12.8") == ("cu128", False)  # no 2.5 build has sm_120
    assert K.torch_build_for_gpu("2.11.0", "3.7", "12.8") == (None, False)
    assert K.torch_build_for_gpu("2.13.0", "12.0", "12.8") == ("cu130", True)  # no cu128 in 2.13
