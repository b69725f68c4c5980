"""What a user's review of `mopt deploy` found: flags the files silently ignored (Kubernetes-only ones with
another target, --cuda and --kernels-for with vLLM's image), a CPU server given a GPU deployment, settings
the server refuses only once the container runs (restarting forever), and a driver warning buried in a
Dockerfile comment. Each is one error line and exit code 2 with nothing written, or a warning on stderr."""

from __future__ import annotations

import json

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.deploy.cuda import choose_cuda

DEPLOY = ["deploy", "--kernels-for", "none", "--driver", "580.65.06"]


def _refused(capsys, out, argv: list[str]) -> str:
    """The one error line of `mopt deploy argv`, which must exit 2 and write nothing."""
    capsys.readouterr()  # what came before: a fixture's progress bars, a model's load
    assert main([*argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mopt deploy: error: "), err
    assert not out.exists()
    return err[0]


@pytest.mark.parametrize(
    "target, flag, value",
    [("compose", "--min-replicas", "2"), ("docker", "--max-replicas", "8"), ("compose", "--storage-class", "nfs")],
)
def test_kubernetes_only_flags_with_another_target_are_refused(tmp_path, capsys, target, flag, value):
    """`--target compose --min-replicas 2` wrote a Compose file running one server, and said nothing."""
    err = _refused(capsys, tmp_path / "out", [*DEPLOY, "--target", target, flag, value])
    assert f"{flag} shapes the Kubernetes manifests only, and --target {target} renders none" in err
    assert main([*DEPLOY, "--target", "k8s", flag, value, "--output", str(tmp_path / "k8s")]) == 0


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--cuda", "12.6", "--cuda picks the torch build of our image; --engine vllm runs vllm/vllm-openai:v0.14.1"),
        ("--kernels-for", "9.0:132:NVIDIA H200", "--kernels-for compiles our engine's Triton kernels"),
    ],
)
def test_flags_of_our_image_are_refused_for_vllms(tmp_path, capsys, flag, value, message):
    """`--engine vllm --cuda 12.6` rendered vLLM's CUDA 12.9 image: a user with an old driver was told nothing."""
    argv = ["deploy", "--target", "docker", "--driver", "580.65.06", "--engine", "vllm", flag, value]
    assert message in _refused(capsys, tmp_path / "out", argv)
    assert main([*DEPLOY, "--target", "docker", "--engine", "vllm", "--output", str(tmp_path / "none")]) == 0


def test_a_cpu_server_is_refused(tmp_path, capsys):
    """--device cpu rendered a CUDA image reserving a GPU for a server that would never use it."""
    err = _refused(capsys, tmp_path / "out", [*DEPLOY, "--device", "cpu"])
    assert err.startswith("mopt deploy: error: --device cpu: a deployment runs on NVIDIA GPUs")


def _cmd(out) -> list[str]:
    line = next(line for line in (out / "Dockerfile").read_text().splitlines() if line.startswith("CMD "))
    return json.loads(line.removeprefix("CMD "))


def test_a_model_length_the_server_refuses_at_start_is_refused(tiny_model, tmp_path, capsys):
    """--max-model-len above max_position_embeddings rendered; the server refused it after loading the
    weights, and the container restarted forever."""
    from model_optimizer import LLM

    model = tiny_model("qwen3")  # max_position_embeddings 512
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        LLM(str(model), max_model_len=513, num_kv_blocks=16)  # what the container's server does
    argv = [*DEPLOY, "--target", "docker", "--model", str(model), "--max-model-len"]
    err = _refused(capsys, tmp_path / "out", [*argv, "513"])
    assert "--max-model-len 513 exceeds the model's max_position_embeddings (512)" in err
    assert main([*argv, "512", "--output", str(tmp_path / "fits")]) == 0
    command = _cmd(tmp_path / "fits")
    assert command[command.index("--max-model-len") + 1] == "512"
    # vLLM derives a longer limit from rope scaling: its own check stands
    assert main([*argv, "513", "--engine", "vllm", "--output", str(tmp_path / "vllm")]) == 0


def test_a_tensor_parallel_size_the_checkpoint_does_not_split_into_is_refused(tiny_model, tmp_path, capsys):
    """-tp 3 on a model of 4 heads rendered a deployment whose server refused to start."""
    argv = [*DEPLOY, "--target", "k8s", "--model", str(tiny_model("qwen3")), "--tensor-parallel-size"]
    err = _refused(capsys, tmp_path / "out", [*argv, "3"])
    assert "num_attention_heads of 4 does not divide by tensor_parallel_size 3" in err
    assert main([*argv, "2", "--output", str(tmp_path / "two")]) == 0


@pytest.mark.parametrize(
    "engine, driver, warning",
    [
        ("vllm", "550.54.14", "Driver 550.54.14 is older than 575.51.03, which vllm/vllm-openai:v0.14.1"),
        ("mopt", "530.30.02", "it runs this build through CUDA minor-version compatibility"),
        ("mopt", "580.65.06", None),
        ("vllm", "580.65.06", None),
    ],
)
def test_a_driver_the_image_may_not_run_on_is_said_on_stderr(tmp_path, capsys, engine, driver, warning):
    """The warning was only a comment in the Dockerfile and a README line: `wrote 4 files` and exit 0."""
    out = tmp_path / "out"
    argv = ["deploy", "--target", "docker", "--kernels-for", "none", "--engine", engine, "--driver", driver]
    assert main([*argv, "--output", str(out)]) == 0
    err = capsys.readouterr().err.strip()
    if warning is None:
        assert err == ""
    else:
        assert err.startswith("mopt deploy: warning: ") and warning in err and len(err.splitlines()) == 1
        assert warning in (out / "Dockerfile").read_text()


def test_the_driver_note_names_a_driver_once_where_there_is_one(tmp_path, capsys):
    """CUDA 13.0 read "needs driver >= 580.65.06 (>= 580.65.06 runs it through minor-version compatibility)"."""
    out = tmp_path / "out"
    assert main([*DEPLOY, "--target", "docker", "--cuda", "13.0", "--output", str(out)]) == 0
    note = (out / "Dockerfile").read_text().splitlines()[2]
    torch = choose_cuda(cuda="13.0").torch
    assert note == f"# CUDA 13.0 (torch {torch}+cu130): needs NVIDIA driver >= 580.65.06."
    assert main([*DEPLOY, "--target", "docker", "--cuda", "12.6", "--output", str(tmp_path / "old")]) == 0
    assert "(>= 525.60.13 runs it through CUDA minor-version compatibility" in (tmp_path / "old/Dockerfile").read_text()
