"""A deployment of tensor_parallel_size N asks for N GPUs on one host, gives its ranks /dev/shm, and
carries the size in both the `mopt serve` and the `vllm serve` command; one GPU stays as it was."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.render import render
from model_optimizer.optimizer.deploy.settings import ServeSettings, mopt_command
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.deploy.test_validate import KUBERNETES_VERSION, _compose_schema


def _settings(size: int, **engine) -> ServeSettings:
    return ServeSettings(EngineConfig(tensor_parallel_size=size, **engine), ServerConfig())


def _files(settings: ServeSettings, target: str, engine: str, tmp_path) -> dict[str, str]:
    deploy = DeployConfig(
        target=target, engine=engine, output=str(tmp_path / f"{target}-{engine}"), driver="570.133.20"
    )
    return render(settings, deploy)


def test_both_commands_carry_the_size():
    settings = _settings(2, one_shot_all_reduce=True)
    argv = mopt_command(settings)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and "--one-shot-all-reduce" in argv
    vllm = vllm_command(settings)
    assert vllm.argv[vllm.argv.index("--tensor-parallel-size") + 1] == "2"
    assert "one_shot_all_reduce" in vllm.untranslated and "tensor_parallel_size" not in vllm.untranslated
    assert "--tensor-parallel-size" not in vllm_command(_settings(1)).argv  # a default: vLLM keeps its own
    assert "--tensor-parallel-size" not in mopt_command(_settings(1))  # our default needs no flag


def test_expert_parallelism_becomes_vllms_flag():
    settings = _settings(2, enable_expert_parallel=True)
    assert "--enable-expert-parallel" in mopt_command(settings)
    vllm = vllm_command(settings)
    assert "--enable-expert-parallel" in vllm.argv and vllm.translated["enable_expert_parallel"]
    off = vllm_command(_settings(2)).argv
    assert not any("expert-parallel" in a for a in off)  # vLLM's default is ours: no --no- flag


@pytest.mark.parametrize("engine", ["mopt", "vllm"])
def test_compose_reserves_n_gpus_and_shares_memory(tmp_path, engine):
    for size, ipc in ((2, "host"), (1, "host" if engine == "vllm" else None)):
        files = _files(_settings(size), "compose", engine, tmp_path)
        compose = yaml.safe_load(files["docker-compose.yml"])
        assert not [e.message for e in _compose_schema().iter_errors(compose)]
        server = compose["services"]["server"]
        assert server["deploy"]["resources"]["reservations"]["devices"][0]["count"] == size
        assert server.get("ipc") == ipc
        if size == 2:  # the image's command runs the ranks
            assert '"--tensor-parallel-size", "2"' in files["Dockerfile"]


@pytest.mark.parametrize("engine", ["mopt", "vllm"])
def test_kubernetes_asks_for_n_gpus_in_one_pod(tmp_path, engine):
    files = _files(_settings(2), "k8s", engine, tmp_path)  # the built-in model's 2 KV heads split in 2, not 4
    deployment = yaml.safe_load(files["k8s/deployment.yaml"])
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["command"][container["command"].index("--tensor-parallel-size") + 1] == "2"
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    one = yaml.safe_load(_files(_settings(1), "k8s", "mopt", tmp_path)["k8s/deployment.yaml"])
    single = one["spec"]["template"]["spec"]["containers"][0]
    assert single["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert all(m["name"] != "shm" for m in single["volumeMounts"])


def test_readme_says_how_many_gpus(tmp_path):
    readme = _files(_settings(2), "docker", "mopt", tmp_path)["README.md"]
    assert "2 NVIDIA GPUs in one host" in readme and "docker run --rm --gpus 2 --ipc host" in readme
    single = _files(_settings(1), "docker", "mopt", tmp_path)["README.md"]
    assert "an NVIDIA GPU" in single and "docker run --rm --gpus 1 -p" in single
