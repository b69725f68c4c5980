"""Render every file of a deployment into memory (output.py writes them)."""

from __future__ import annotations

import yaml

from model_optimizer.optimizer.deploy import compose, kubernetes, monitoring
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.cuda import CudaChoice, choose_cuda, local_driver
from model_optimizer.optimizer.deploy.dockerfile import render_dockerfile
from model_optimizer.optimizer.deploy.kernels import CONTEXT_DIR, KernelPlan, plan_kernels
from model_optimizer.optimizer.deploy.readme import render_readme
from model_optimizer.optimizer.deploy.settings import ServeSettings, mopt_command, non_defaults
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command
from model_optimizer.runtime.models.chat_templates import load_template


def _yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def host_build(deploy: DeployConfig) -> tuple[str | None, CudaChoice | None]:
    """The host driver the files are for (--driver, else this machine's; None: unknown) and the CUDA build
    of our image chosen for it. None for vLLM: its image brings its own CUDA, whose driver need driver_note
    checks; ours installs a torch build."""
    driver = deploy.driver or local_driver()
    return driver, None if deploy.engine == "vllm" else choose_cuda(driver, deploy.cuda)


def render(settings: ServeSettings, deploy: DeployConfig) -> dict[str, str]:
    """Relative path -> text of every file the target needs (the package source is copied by output.write)."""
    settings.check_host_folders()  # the folders the files mount, and size and copy from
    if deploy.engine == "mopt":
        settings.check_model_fits()
    driver, cuda = host_build(deploy)
    if deploy.engine == "vllm":
        vllm = vllm_command(settings)
        command, untranslated = vllm.argv, vllm.untranslated
    else:
        command, untranslated = mopt_command(settings), {}
    kernels = plan_kernels(settings, deploy.kernels_for) if deploy.engine == "mopt" else KernelPlan(None)
    saved = {**non_defaults(settings.engine), **non_defaults(settings.server)}
    saved.pop("api_key", None)
    files = {
        "Dockerfile": render_dockerfile(settings, deploy, cuda, command, kernels, driver),
        ".dockerignore": f"*\n!src/\n!chat_template.jinja\n!{CONTEXT_DIR}/\n",
        "settings.yaml": "# The settings these files run (mopt serve --config settings.yaml reads them).\n"
        + (_yaml(saved) if saved else "{}\n"),
    }
    if settings.server.chat_template:
        # a shipped name (chatml), a file or the template itself, as `mopt serve` reads --chat-template
        files["chat_template.jinja"] = load_template(settings.server.chat_template)
    if kernels.target is not None:  # the one file of the model the image holds: the kernel build reads it
        files[f"{CONTEXT_DIR}/config.json"] = (settings.host_model_dir / "config.json").read_text()
    if deploy.target == "compose":
        files.update(_compose_files(settings, deploy))
    if deploy.target == "k8s":
        files.update(_k8s_files(settings, deploy, command))
    files["README.md"] = render_readme(settings, deploy, cuda, command, untranslated, kernels, driver)
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
        "k8s/hpa.yaml": _yaml(kubernetes.autoscaler(deploy)),
        "monitoring/prometheus-adapter-values.yaml": _yaml(kubernetes.adapter_values()),
        "monitoring/alerts.yml": _yaml(monitoring.alert_rules(pod_prefix=kubernetes.APP)),
        "monitoring/mopt-serving.json": monitoring.dashboard_json(),
    }
    if settings.server.metrics_auth:  # the pods' annotations are off: this job scrapes them with the key
        files[kubernetes.SCRAPE_FILE] = _yaml(
            monitoring.kubernetes_scrape_config(kubernetes.APP, kubernetes.SCRAPE_KEY_FILE)
        )
    for mount in settings.mounts:  # each folder: its claim, and the pod the README fills it through
        files[kubernetes.claim_file(mount)] = _yaml(kubernetes.volume_claim(mount, deploy))
        files[kubernetes.loader_file(mount)] = _yaml(kubernetes.loader_pod(mount))
    return files
