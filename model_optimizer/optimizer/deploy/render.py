"""Render every file of a deployment into memory, then write them atomically into the output folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from model_optimizer.optimizer.deploy import compose, kubernetes, monitoring
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.cuda import choose_cuda, local_driver
from model_optimizer.optimizer.deploy.dockerfile import render_dockerfile
from model_optimizer.optimizer.deploy.kernels import CONTEXT_DIR, KernelPlan, plan_kernels
from model_optimizer.optimizer.deploy.readme import render_readme
from model_optimizer.optimizer.deploy.settings import (
    MODEL_DIR,
    TOKENIZER_DIR,
    ServeSettings,
    mopt_command,
    non_defaults,
)
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command

MANIFEST = ".mopt-deploy-files.json"
"""The files of the folder's last render (relative paths), so the next render can remove the ones it no
longer writes: a docker render over a compose one left a docker-compose.yml that ran the old settings."""
SOURCE_SKIP = ("__pycache__", "*.pyc", "*.safetensors", "*.egg-info")
"""Left out of the source copied into the image: caches and weights (models are mounted, never baked in)."""


def _yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def render(settings: ServeSettings, deploy: DeployConfig) -> dict[str, str]:
    """Relative path -> text of every file the target needs (the package source is copied by `write`)."""
    cuda = choose_cuda(deploy.driver or local_driver(), deploy.cuda)
    if deploy.engine == "vllm":
        vllm = vllm_command(settings)
        command, untranslated = vllm.argv, vllm.untranslated
    else:
        command, untranslated = mopt_command(settings), {}
    kernels = plan_kernels(settings, deploy.kernels_for) if deploy.engine == "mopt" else KernelPlan(None)
    saved = {**non_defaults(settings.engine), **non_defaults(settings.server)}
    saved.pop("api_key", None)
    files = {
        "Dockerfile": render_dockerfile(settings, deploy, cuda, command, kernels),
        ".dockerignore": f"*\n!src/\n!chat_template.jinja\n!{CONTEXT_DIR}/\n",
        "settings.yaml": "# The settings these files run (mopt serve --config settings.yaml reads them).\n"
        + (_yaml(saved) if saved else "{}\n"),
    }
    if settings.server.chat_template:
        files["chat_template.jinja"] = Path(settings.server.chat_template).expanduser().read_text()
    if kernels.target is not None:  # the one file of the model the image holds: the kernel build reads it
        files[f"{CONTEXT_DIR}/config.json"] = (settings.host_model_dir / "config.json").read_text()
    if deploy.target == "compose":
        files.update(_compose_files(settings, deploy))
    if deploy.target == "k8s":
        files.update(_k8s_files(settings, deploy, command))
    files["README.md"] = render_readme(settings, deploy, cuda, command, untranslated, kernels)
    return files


def _compose_files(settings: ServeSettings, deploy: DeployConfig) -> dict[str, str]:
    gpu_target = f"dcgm-exporter:{compose.DCGM_PORT}"
    return {
        "docker-compose.yml": _yaml(compose.compose_file(settings, deploy)),
        "prometheus/prometheus.yml": _yaml(
            monitoring.prometheus_config(settings, f"server:{settings.port}", gpu_target)
        ),
        "prometheus/alerts.yml": _yaml(monitoring.alert_rules()),
        "grafana/provisioning/datasources/prometheus.yml": _yaml(
            monitoring.grafana_datasource("http://prometheus:9090")
        ),
        "grafana/provisioning/dashboards/mopt.yml": _yaml(
            monitoring.grafana_dashboard_provider("/var/lib/grafana/dashboards")
        ),
        "grafana/dashboards/mopt-serving.json": monitoring.dashboard_json(),
    }


def _k8s_files(settings: ServeSettings, deploy: DeployConfig, command: list[str]) -> dict[str, str]:
    files = {
        "k8s/deployment.yaml": _yaml(kubernetes.deployment(settings, deploy, command)),
        "k8s/service.yaml": _yaml(kubernetes.service(settings)),
        "k8s/model-pvc.yaml": _yaml(
            kubernetes.model_claim(f"{kubernetes.APP}-model", _size(settings.host_model_dir), deploy)
        ),
        "k8s/setup/model-loader.yaml": _yaml(
            kubernetes.loader_pod(f"{kubernetes.APP}-model-loader", f"{kubernetes.APP}-model", MODEL_DIR)
        ),
        "k8s/hpa.yaml": _yaml(kubernetes.autoscaler(deploy)),
        "monitoring/prometheus-adapter-values.yaml": _yaml(kubernetes.adapter_values()),
        "monitoring/alerts.yml": _yaml(monitoring.alert_rules()),
        "monitoring/mopt-serving.json": monitoring.dashboard_json(),
    }
    if settings.engine.tokenizer:
        size = _size(Path(settings.engine.tokenizer).expanduser())
        claim = f"{kubernetes.APP}-tokenizer"
        files["k8s/tokenizer-pvc.yaml"] = _yaml(kubernetes.model_claim(claim, size, deploy))
        files["k8s/setup/tokenizer-loader.yaml"] = _yaml(kubernetes.loader_pod(f"{claim}-loader", claim, TOKENIZER_DIR))
    if settings.host_draft_dir is not None:
        size = _size(settings.host_draft_dir)
        claim = f"{kubernetes.APP}-draft-model"
        files["k8s/draft-model-pvc.yaml"] = _yaml(kubernetes.model_claim(claim, size, deploy))
    return files


def _size(folder: Path) -> int:
    """Bytes under `folder` (0 when it is not on this machine)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def project_root() -> Path:
    """The source checkout the image installs our package from."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        raise ValueError(
            f"mopt deploy builds the image from the project source, and {root} has no pyproject.toml; "
            "run it from a source checkout of model-optimizer"
        )
    return root


def check_output(output: str, model_dir: Path) -> None:
    """ValueError for an output folder the files must not go to: empty (the current folder), a file, under
    a file, or the model folder or inside it (README.md would replace the model card)."""
    from model_optimizer.common.fileio import check_writable_folder_path

    check_writable_folder_path(output, "--output")
    out, model = Path(output).expanduser().resolve(), model_dir.resolve()
    if out == model or model in out.parents:
        where = "is the model folder" if out == model else f"is inside the model folder {model}"
        raise ValueError(f"--output {output} {where}; give a folder of its own (README.md would replace the model's)")


def write(files: dict[str, str], output: str | Path, with_source: bool) -> list[Path]:
    """Write each file atomically (a temporary file in its folder, then os.replace), plus the package
    source under src/ when the image installs our server. Returns the paths written. The files of the
    folder's previous render that this one does not write (docker-compose.yml, grafana/ after a compose
    render re-rendered for docker) are removed; anything else in the folder is left alone."""
    out = Path(output).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale(out, set(files) | ({"src"} if with_source else set()))
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        written.append(path)
    if with_source:
        written.append(_copy_source(out))
    _write_manifest(out, sorted(files) + (["src"] if with_source else []))
    return written


def _remove_stale(out: Path, keep: set[str]) -> None:
    """Remove what the previous render listed in MANIFEST and this one does not write, then the
    folders that left empty; a folder without MANIFEST (never rendered, or by an older version) keeps all."""
    manifest = out / MANIFEST
    try:
        previous = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return
    for rel in previous if isinstance(previous, list) else []:
        path = out / str(rel)
        if rel in keep or out.resolve() not in path.resolve().parents:  # never outside the folder
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        for parent in path.parents:
            if parent == out or not parent.is_dir() or any(parent.iterdir()):
                break
            parent.rmdir()


def _write_manifest(out: Path, rel_paths: list[str]) -> None:
    from model_optimizer.common.fileio import atomic_write

    atomic_write(out / MANIFEST, json.dumps(rel_paths, indent=1))


def _copy_source(out: Path) -> Path:
    """src/: pyproject.toml, README.md and the package, swapped in whole for any older copy."""
    root = project_root()
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".src."))
    shutil.copy2(root / "pyproject.toml", staging / "pyproject.toml")
    shutil.copy2(root / "README.md", staging / "README.md")
    shutil.copytree(root / "model_optimizer", staging / "model_optimizer", ignore=shutil.ignore_patterns(*SOURCE_SKIP))
    os.chmod(staging, 0o755)
    target = out / "src"
    if target.exists():
        old = out / f".src.old.{os.getpid()}"
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old)
    else:
        os.replace(staging, target)
    return target
