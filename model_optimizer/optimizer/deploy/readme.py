"""The README written beside the deployment files: how to build and run them, what the host needs, and
(for vLLM) the settings vLLM cannot express."""

from __future__ import annotations

import shlex

from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.cuda import CudaChoice
from model_optimizer.optimizer.deploy.dockerfile import driver_note
from model_optimizer.optimizer.deploy.kernels import KernelPlan, readme_note
from model_optimizer.optimizer.deploy.kubernetes import APP, QUEUE_METRIC, claim_access_mode
from model_optimizer.optimizer.deploy.settings import MODEL_DIR, ServeSettings


def render_readme(
    settings: ServeSettings,
    deploy: DeployConfig,
    cuda: CudaChoice,
    command: list[str],
    untranslated: dict[str, str],
    kernels: KernelPlan,
) -> str:
    port, image = settings.port, deploy.image
    lines = [
        f"# Deployment of {settings.model_name} ({deploy.engine}, {deploy.target})",
        "",
        "Rendered by `mopt deploy` from `settings.yaml`; render again rather than editing these files.",
        "",
        f"- Host: {_gpus_wanted(settings.num_gpus)} and driver. {driver_note(deploy, cuda)}",
        f"- Model: `{settings.host_model_dir}` on the host, mounted read-only at `{MODEL_DIR}`.",
        f"- Command: `{shlex.join(command)}`",
        f"- API key: {_api_key_note(settings.needs_api_key)}",
        *([f"- Triton kernels: {readme_note(kernels)}"] if deploy.engine == "mopt" else []),
        "",
        "## Build",
        "",
        "```bash",
        f"docker build -t {image} .",
        "```",
        "",
    ]
    if deploy.target == "docker":
        key = " -e MOPT_API_KEY" if deploy.engine == "mopt" else ""
        env = 'VLLM_API_KEY="$MOPT_API_KEY"' if deploy.engine == "vllm" else ""
        shm = " --ipc host" if settings.shares_memory else ""  # tensor-parallel ranks talk through /dev/shm
        lines += [
            "## Run",
            "",
            "```bash",
            f"docker run --rm --gpus {settings.num_gpus}{shm} -p {port}:{port}{key}{' -e ' + env if env else ''} \\",
            f"  --mount type=bind,source={settings.host_model_dir},target={MODEL_DIR},readonly {image}",
            "```",
            "",
        ]
    ready = "" if deploy.engine == "vllm" else "readiness at /ready, "  # vLLM has no /ready
    if deploy.target == "compose":
        lines += [
            "## Run",
            "",
            "```bash",
            "docker compose up -d --build",
            "```",
            "",
            f"- server: http://localhost:{port} (health at /health, {ready}metrics at /metrics)",
            "- Prometheus: http://localhost:9090 (alerts in `prometheus/alerts.yml`)",
            '- Grafana: http://localhost:3000, dashboard "Model-Optimizer serving" (admin password: '
            "`GRAFANA_ADMIN_PASSWORD`, default admin)",
            "- GPU metrics: NVIDIA's DCGM exporter",
            "- Another model folder: `MOPT_MODEL_DIR=/path docker compose up -d`",
            f"- Terminal view: `mopt top --url http://localhost:{port}`",
            "",
        ]
    if deploy.target == "k8s":
        lines += [
            "## Run",
            "",
            "1. Push the image where the cluster pulls from and set `image:` in `k8s/deployment.yaml`.",
            *_copy_model_steps(settings, deploy),
            f'3. `kubectl create secret generic {APP}-api-key --from-literal=api-key="$MOPT_API_KEY"`'
            + (" (required)" if settings.needs_api_key else " (optional)"),
            "4. `kubectl apply -f k8s/`",
            f"5. Autoscaling on queue depth: install prometheus-adapter with `monitoring/prometheus-adapter-values.yaml`; "
            f"it serves `{QUEUE_METRIC}` (vllm:num_requests_waiting) per pod to the HPA.",
            "6. Pods carry `prometheus.io/scrape` annotations; load `monitoring/alerts.yml` into Prometheus and "
            "`monitoring/mopt-serving.json` into Grafana.",
            "",
            f"The startupProbe allows {deploy.cold_start} s of cold start plus 50%; termination waits for the "
            f"server's {settings.server.shutdown_timeout:g} s drain.",
            "",
        ]
    if deploy.engine == "vllm":
        lines += ["## Settings vLLM cannot express", ""]
        if untranslated:
            lines += ["| setting | value | why |", "| --- | --- | --- |"]
            inside = settings.in_container()
            values = {**vars(inside.engine), **vars(inside.server)}
            lines += [f"| {name} | {values[name]} | {why} |" for name, why in untranslated.items()]
        else:
            lines.append("None: every setting that differs from our defaults has a vLLM flag.")
        lines.append("")
    return "\n".join(lines)


def _copy_model_steps(settings: ServeSettings, deploy: DeployConfig) -> list[str]:
    """Step 2: the claim, a loader pod that mounts it writable, the copy, and the loader gone again."""
    loader = f"{APP}-model-loader"
    cls = f"`{deploy.storage_class}`" if deploy.storage_class else "the cluster's default (`--storage-class`)"
    return [
        f"2. Copy the model into the volume of claim `{APP}-model` (`k8s/model-pvc.yaml`, "
        f"{claim_access_mode(deploy)}: its storage class, {cls}, must offer that mode or the claim stays "
        "Pending). The loader pod mounts it writable as the server's uid; the servers mount it read-only:",
        "   ```bash",
        "   kubectl apply -f k8s/model-pvc.yaml -f k8s/setup/model-loader.yaml",
        f"   kubectl wait --for=condition=Ready pod/{loader} --timeout=5m",
        f"   tar -C {shlex.quote(str(settings.host_model_dir))} -cf - . | kubectl exec -i {loader} -- tar -xf - -C {MODEL_DIR}",
        f"   kubectl delete pod {loader}",
        "   ```",
    ]


def _api_key_note(required: bool) -> str:
    where = "the server reads it from the host's `MOPT_API_KEY`, passed on at start, never from these files"
    if required:
        return f"required: {where}; the containers do not start without it."
    return f"optional: {where}; unset, the server answers without a key."


def _gpus_wanted(count: int) -> str:
    if count == 1:
        return "an NVIDIA GPU"
    return f"{count} NVIDIA GPUs in one host (tensor_parallel_size {count}; NVLink keeps the all-reduces short)"
