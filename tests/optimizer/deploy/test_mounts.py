"""The folders a deployment mounts (model, tokenizer, draft model): each a folder on this host, refused
otherwise; mounted by every target at the path the command names, under any name a path can have; and on
Kubernetes, each claim filled by a loader pod the README says how to use."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from model_optimizer.cli.main import main

TARGETS = {"/model", "/tokenizer", "/draft_model"}
STRANGE = "my models/it's $HOME,x"
"""A folder name with a space, a quote, a `$` and a comma: the shell, Compose and docker's --mount CSV each
read one of them."""


def _folders(tmp_path: Path, tiny_model) -> dict[str, Path]:
    """A model under a strange name, a tokenizer and a draft model (the tiny model's own files)."""
    model = tmp_path / STRANGE
    shutil.copytree(tiny_model("qwen3"), model)
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text((model / "tokenizer.json").read_text())
    return {"/model": model, "/tokenizer": tokenizer, "/draft_model": tiny_model("qwen3")}


def _argv(target: str, engine: str, folders: dict[str, Path], out: Path) -> list[str]:
    spec = json.dumps({"model": str(folders["/draft_model"]), "num_speculative_tokens": 2})
    return [
        "deploy", "--target", target, "--engine", engine, "--kernels-for", "none", "--driver", "570.133.20",
        "--model", str(folders["/model"]), "--tokenizer", str(folders["/tokenizer"]),
        "--speculative-config", spec, "--output", str(out),
    ]  # fmt: skip


def _run_block(readme: str) -> str:
    return readme.split("## Run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]


def _docker_argv(readme: str, env: dict[str, str]) -> list[str]:
    """The README's `docker run` as bash runs it, with `docker` a function that prints its arguments."""
    fake = f'docker() {{ "{sys.executable}" -c "import json, sys; print(json.dumps(sys.argv[1:]))" "$@"; }}\n'
    result = subprocess.run(
        ["bash", "-c", fake + _run_block(readme)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _mounts(argv: list[str]) -> dict[str, str]:
    """--mount target -> source, read as docker reads the value: one CSV record of key=value fields."""
    mounts = {}
    for value in (argv[i + 1] for i, word in enumerate(argv) if word == "--mount"):
        fields = dict(field.split("=", 1) for field in next(csv.reader([value])) if "=" in field)
        assert fields["type"] == "bind" and "readonly" in value
        mounts[fields["target"]] = fields["source"]
    return mounts


@pytest.mark.parametrize("engine", ["mopt", "vllm"])
def test_docker_run_mounts_every_folder_the_command_names(tmp_path, capsys, tiny_model, engine):
    """Only /model was mounted while the command read /tokenizer and /draft_model; the model path was not
    shell-quoted and its comma split docker's --mount value; vLLM's run had no --ipc host."""
    folders = _folders(tmp_path, tiny_model)
    out = tmp_path / "out"
    assert main(_argv("docker", engine, folders, out)) == 0
    cmd = json.loads(
        next(line for line in (out / "Dockerfile").read_text().splitlines() if line.startswith("CMD "))[4:]
    )
    named = {word for word in cmd for target in TARGETS if target in word}
    assert "/tokenizer" in named and any("/draft_model" in word for word in named)
    argv = _docker_argv((out / "README.md").read_text(), {"MOPT_API_KEY": "sk-host"})
    assert _mounts(argv) == {target: str(folder.resolve()) for target, folder in folders.items()}
    assert ("--ipc" in argv and argv[argv.index("--ipc") + 1] == "host") == (engine == "vllm")  # vLLM's workers
    key = "MOPT_API_KEY" if engine == "mopt" else "VLLM_API_KEY=sk-host"
    assert argv[argv.index("-e") + 1] == key


def test_compose_mounts_absolute_paths_with_dollars_escaped(tmp_path, capsys, tiny_model, monkeypatch):
    """`--tokenizer ./tok` became `source: ./tok`, which Compose resolves against the deployment folder; a
    `$` in the model path was written bare inside ${MOPT_MODEL_DIR:-...}, where Compose expands it."""
    folders = _folders(tmp_path, tiny_model)
    monkeypatch.chdir(tmp_path)
    argv = _argv("compose", "mopt", folders, tmp_path / "out")
    argv[argv.index("--tokenizer") + 1] = "./tok"
    assert main(argv) == 0
    compose = yaml.safe_load((tmp_path / "out" / "docker-compose.yml").read_text())
    sources = {v["target"]: v["source"] for v in compose["services"]["server"]["volumes"]}
    model = str(folders["/model"].resolve())
    assert sources["/model"] == "${MOPT_MODEL_DIR:-" + model.replace("$", "$$") + "}"
    default = sources["/model"][len("${MOPT_MODEL_DIR:-") : -1]
    assert "$" not in default.replace("$$", "") and default.replace("$$", "$") == model  # no lone `$` to expand
    assert sources["/tokenizer"] == str(tmp_path / "tok") and Path(sources["/draft_model"]).is_absolute()


def test_compose_writes_a_model_path_holding_a_brace_without_the_override(tmp_path, tiny_model):
    """Compose ends ${MOPT_MODEL_DIR:-default} at the default's first `}` (no escape exists), which mounted a
    path cut short with a stray `}` after it."""
    model = tmp_path / "m}odel"
    shutil.copytree(tiny_model("qwen3"), model)
    out = tmp_path / "out"
    argv = ["deploy", "--target", "compose", "--engine", "mopt", "--kernels-for", "none", "--driver", "570.133.20"]
    assert main([*argv, "--model", str(model), "--output", str(out)]) == 0
    compose = yaml.safe_load((out / "docker-compose.yml").read_text())
    [volume] = compose["services"]["server"]["volumes"]
    assert volume["source"] == str(model.resolve())
    assert "MOPT_MODEL_DIR" not in (out / "README.md").read_text()


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--model", "Qwen/Qwen3-0.6B", "is not a folder on this host: a deployment mounts folders, and a Hugging"),
        ("--tokenizer", "Qwen/Qwen3-0.6B", "is not a folder on this host: a deployment mounts folders, and a Hugging"),
        ("--model", "/nonexistent/typo", "does not exist; give the folder"),
        ("--model", "FILE", "is a file; give the folder that holds it"),
    ],
)
def test_a_folder_that_is_not_one_is_refused(tmp_path, capsys, flag, value, message):
    """`--model Qwen/Qwen3-0.6B` became the mount $PWD/Qwen/Qwen3-0.6B; a typo or a file rendered (exit 0);
    a Hub id tokenizer became a bind mount."""
    if value == "FILE":
        value = str(tmp_path / "config.json")
        Path(value).write_text("{}")
    out = tmp_path / "out"
    assert main(["deploy", "--target", "compose", "--engine", "vllm", flag, value, "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mopt deploy: error: {flag} {value} {message}") and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_kubernetes_readme_fills_every_claim(tmp_path, capsys, tiny_model):
    """k8s/draft-model-pvc.yaml had no loader pod and no README step; tokenizer-loader.yaml was written but
    never mentioned."""
    folders = _folders(tmp_path, tiny_model)
    out = tmp_path / "out"
    assert main(_argv("k8s", "vllm", folders, out)) == 0
    readme = (out / "README.md").read_text()
    claims = sorted((out / "k8s").glob("*-pvc.yaml"))
    assert {p.name for p in claims} == {"model-pvc.yaml", "tokenizer-pvc.yaml", "draft-model-pvc.yaml"}
    deployment = yaml.safe_load((out / "k8s" / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    mount_of = {m["name"]: m["mountPath"] for m in deployment["containers"][0]["volumeMounts"]}
    claim_of = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in deployment["volumes"]
        if "persistentVolumeClaim" in v
    }
    for path in claims:
        claim = yaml.safe_load(path.read_text())["metadata"]["name"]
        volume = next(name for name, c in claim_of.items() if c == claim)
        loader_path = out / "k8s" / "setup" / path.name.replace("-pvc", "-loader")
        loader = yaml.safe_load(loader_path.read_text())
        pod = loader["metadata"]["name"]
        assert loader["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
        assert loader["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == mount_of[volume]
        host = str(folders[mount_of[volume]].resolve())
        assert f"kubectl apply -f k8s/{path.name} -f k8s/setup/{loader_path.name}" in readme
        assert re.search(rf"tar -C .+ -cf - \. \| kubectl exec -i {pod} -- tar -xf - -C {mount_of[volume]}\n", readme)
        assert f"kubectl delete pod {pod}" in readme
        tar = next(line for line in readme.splitlines() if f"kubectl exec -i {pod} " in line)
        assert shlex.split(tar.split(" | ")[0])[:3] == ["tar", "-C", host]  # the shell reads the path whole
