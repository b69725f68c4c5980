"""Deployments that rendered but did not run as written: the default Compose server restarting on an empty
API key, a kernel build reading folders mounted only at run time, host ports published twice, Hugging Face
cache links broken in the container, a re-render writing through a link, monitoring folders unreadable under
a strict umask, a driver refused that runs the image, metrics behind a key nobody scrapes with, and an alert
that could not fire on Kubernetes."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
from pathlib import Path

import jsonschema
import pytest
import yaml

from model_optimizer.cli.main import main
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.output import MANIFEST, write
from model_optimizer.optimizer.deploy.render import render
from model_optimizer.optimizer.deploy.settings import ServeSettings
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig

SCHEMAS = Path(__file__).parent / "schemas"
COMPOSE = ["deploy", "--target", "compose", "--kernels-for", "none", "--driver", "570.133.20"]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after any progress bar (the tiny model's shards)
    assert err.startswith("mopt deploy: error: "), err
    return err


def _render(out: Path, settings: ServeSettings | None = None, **deploy) -> Path:
    settings = settings or ServeSettings(EngineConfig(), ServerConfig())
    config = DeployConfig(output=str(out), **{"driver": "570.133.20", "kernels_for": "none", **deploy})
    write(render(settings, config), out, with_source=False)
    return out


# 1. an optional API key


def test_our_compose_server_gets_no_empty_api_key(tmp_path):
    """`${MOPT_API_KEY:-}` gave the container MOPT_API_KEY="" with the host variable unset, which `mopt serve`
    refuses: the default deployment restarted forever. A key with no value is passed when set, else left out."""
    compose = yaml.safe_load((_render(tmp_path / "out", target="compose") / "docker-compose.yml").read_text())
    assert compose["services"]["server"]["environment"] == {"MOPT_API_KEY": None}
    required = ServeSettings(EngineConfig(), ServerConfig(api_key="sk-x"))
    compose = yaml.safe_load((_render(tmp_path / "req", required, target="compose") / "docker-compose.yml").read_text())
    assert compose["services"]["server"]["environment"]["MOPT_API_KEY"].startswith("${MOPT_API_KEY:?")


def test_kubernetes_readme_creates_the_secret_only_with_a_key(tmp_path):
    out = _render(tmp_path / "out", target="k8s")
    deployment = yaml.safe_load((out / "k8s/deployment.yaml").read_text())
    ref = deployment["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is True
    step = next(line for line in (out / "README.md").read_text().splitlines() if line.startswith("3. "))
    assert step.startswith("3. Only to require an API key: set MOPT_API_KEY") and "empty value" in step
    required = _render(tmp_path / "req", ServeSettings(EngineConfig(), ServerConfig(api_key="sk-x")), target="k8s")
    step = next(line for line in (required / "README.md").read_text().splitlines() if line.startswith("3. "))
    assert "(required" in step and "kubectl create secret generic mopt-serve-api-key" in step


# 2. the kernel build


def test_the_kernel_build_reads_no_folder_mounted_at_run_time(tiny_model, tmp_path):
    """--tokenizer /tokenizer in `RUN mopt compile-cache build` failed `docker build`: the folder is mounted
    only when the container runs."""
    model = tiny_model("qwen3")
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text((model / "tokenizer.json").read_text())
    spec = {"model": str(model), "num_speculative_tokens": 2}
    settings = ServeSettings(
        EngineConfig(model=str(model), tokenizer=str(tokenizer), speculative_config=spec), ServerConfig()
    )
    out = _render(tmp_path / "out", settings, target="docker", kernels_for="9.0:132:NVIDIA H200")
    dockerfile = (out / "Dockerfile").read_text()
    build = next(line for line in dockerfile.splitlines() if line.startswith("RUN mopt compile-cache build "))
    argv = shlex.split(build.removeprefix("RUN "))
    assert "--tokenizer" not in argv and "--speculative-config" not in argv
    assert "/tokenizer" not in build and "/draft_model" not in build
    command = json.loads(dockerfile.rstrip().splitlines()[-1].removeprefix("CMD "))
    assert command[command.index("--tokenizer") + 1] == "/tokenizer"  # the server still reads them
    assert json.loads(command[command.index("--speculative-config") + 1])["model"] == "/draft_model"


# 3. host ports


@pytest.mark.parametrize("port, service", [(3000, "Grafana"), (9090, "Prometheus")])
def test_a_server_port_compose_publishes_for_monitoring_is_refused(tmp_path, capsys, port, service):
    out = tmp_path / "out"
    assert main([*COMPOSE, "--port", str(port), "--output", str(out)]) == 2
    err = _error(capsys)
    assert f"--port {port}" in err and service in err and "clash" in err
    assert not out.exists()
    docker = ["deploy", "--target", "docker", "--kernels-for", "none", "--driver", "570.133.20"]
    assert main([*docker, "--port", str(port), "--output", str(out)]) == 0  # nothing else is published


# 4. Hugging Face cache snapshots


def test_a_folder_of_links_leading_outside_it_is_refused(tiny_model, tmp_path, capsys):
    """A Hub cache snapshot's files are links to ../../blobs: mounted alone, every one is broken."""
    repo = tmp_path / "hub" / "models--x--y"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    for file in tiny_model("qwen3").iterdir():
        if file.is_file():
            shutil.copy(file, repo / "blobs" / file.name)
            (snapshot / file.name).symlink_to(Path("../../blobs") / file.name)
    out = tmp_path / "out"
    assert main([*COMPOSE, "--model", str(snapshot), "--output", str(out)]) == 2
    err = _error(capsys)
    assert f"--model {snapshot} holds links that lead outside it" in err and "../../blobs/" in err
    assert "hf download ID --local-dir DIR" in err and not out.exists()
    # links inside the folder, and the folder itself behind a link, are fine
    own = tmp_path / "own"
    shutil.copytree(tiny_model("qwen3"), own)
    (own / "extra.json").symlink_to("config.json")
    (tmp_path / "current").symlink_to(own)
    assert main([*COMPOSE, "--model", str(tmp_path / "current"), "--output", str(out)]) == 0


# 5. links in the output folder


@pytest.mark.parametrize("name", ["Dockerfile", MANIFEST])
def test_a_rerender_does_not_write_through_a_link(tmp_path, capsys, name):
    out = tmp_path / "out"
    argv = ["deploy", "--target", "docker", "--engine", "vllm", "--driver", "580.95.05", "--output", str(out)]
    assert main(argv) == 0
    mine = tmp_path / "mine.txt"
    mine.write_text((out / name).read_text() if name == MANIFEST else "my own file\n")
    (out / name).unlink()
    (out / name).symlink_to(mine)
    before = mine.read_text()
    assert main(argv) == 2
    err = _error(capsys)
    assert f"{out / name} is a symlink (to {mine})" in err
    assert mine.read_text() == before and (out / name).is_symlink()


# 6. folder modes


def test_rendered_folders_are_readable_by_the_monitoring_containers_under_a_strict_umask(tmp_path):
    old = os.umask(0o027)
    try:
        out = _render(tmp_path / "out", target="compose")
    finally:
        os.umask(old)
    folders = [p for p in out.rglob("*") if p.is_dir()]
    assert {p.relative_to(out).as_posix() for p in folders} >= {
        "prometheus",
        "grafana/provisioning/datasources",
        "grafana/dashboards",
    }
    for folder in folders:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
    for file in (p for p in out.rglob("*") if p.is_file() and p.name != MANIFEST):
        assert stat.S_IMODE(file.stat().st_mode) == 0o644, file


# 7. the host driver


def test_a_driver_below_every_builds_minimum_runs_one_through_minor_version_compatibility(tmp_path, capsys):
    """535 was refused though the files themselves said >= 525.60.13 runs CUDA 12 builds."""
    out = _render(tmp_path / "out", target="docker", driver="535.104.05")
    dockerfile = (out / "Dockerfile").read_text()
    assert "FROM nvidia/cuda:12.6." in dockerfile and "download.pytorch.org/whl/cu126" in dockerfile
    readme = (out / "README.md").read_text()
    assert "Driver 535.104.05 is older than 560.28.03" in readme and "minor-version compatibility" in readme
    assert main(["deploy", "--driver", "470.129.06", "--output", str(tmp_path / "old")]) == 2
    assert "driver 470.129.06 is older than 525.60.13" in _error(capsys)


@pytest.mark.parametrize("driver", ["570.133.20", "535.104.05"])
def test_vllm_checks_the_driver_against_its_images_cuda(tmp_path, driver):
    """vLLM's image brings CUDA 12.9 (driver >= 575.51.03): the torch matrix (12.8 for 570) is not its."""
    readme = (_render(tmp_path / "out", target="docker", engine="vllm", driver=driver) / "README.md").read_text()
    assert f"Driver {driver} is older than 575.51.03" in readme and "install driver branch 575" in readme
    assert "torch" not in readme.split("## Build")[0]
    readme = (_render(tmp_path / "new", target="docker", engine="vllm", driver="580.95.05") / "README.md").read_text()
    assert "is older than" not in readme


# 8 and 10. Kubernetes monitoring


def test_kubernetes_metrics_behind_the_key_get_a_scrape_job_that_sends_it(tmp_path):
    settings = ServeSettings(EngineConfig(), ServerConfig(api_key="sk-x", metrics_auth=True))
    out = _render(tmp_path / "out", settings, target="k8s")
    pod = yaml.safe_load((out / "k8s/deployment.yaml").read_text())["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "false"  # a keyless scrape gets 401
    config = yaml.safe_load((out / "monitoring/prometheus-scrape-config.yaml").read_text())
    schema = json.loads((SCHEMAS / "prometheus-config.schema.json").read_text())
    assert not [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(config)]
    job = config["scrape_configs"][0]
    assert job["authorization"]["credentials_file"] == "/etc/prometheus/secrets/mopt-serve-api-key/api-key"
    targets = {r.get("target_label") for r in job["relabel_configs"]}
    assert {"namespace", "pod"} <= targets  # the adapter's rule and the alerts read them
    assert "monitoring/prometheus-scrape-config.yaml" in (out / "README.md").read_text()
    plain = _render(tmp_path / "plain", target="k8s")
    assert not (plain / "monitoring/prometheus-scrape-config.yaml").exists()


def test_the_kubernetes_down_alert_can_fire(tmp_path):
    """`up{job="mopt"}` matched nothing on Kubernetes, where pods are found by another job."""
    rules = yaml.safe_load((_render(tmp_path / "k8s", target="k8s") / "monitoring/alerts.yml").read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert 'job="mopt"' not in " ".join(exprs.values())
    assert exprs["MoptDown"] == 'up{pod=~"mopt-serve-.*"} == 0'
    assert exprs["MoptAllDown"] == 'absent(up{pod=~"mopt-serve-.*"} == 1)'
    rules = yaml.safe_load((_render(tmp_path / "compose", target="compose") / "prometheus/alerts.yml").read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert exprs["MoptDown"] == 'up{job="mopt"} == 0' and "MoptAllDown" not in exprs
