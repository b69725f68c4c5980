"""The README written beside the deployment files: how to build and run them, what the host needs, and
(for vLLM) the settings vLLM cannot express."""

from __future__ import annotations

import csv
import io
import shlex

from model_optimizer.optimizer.deploy.compose import model_dir_overridable
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.cuda import CudaChoice
from model_optimizer.optimizer.deploy.dockerfile import driver_note
from model_optimizer.optimizer.deploy.kernels import KernelPlan, readme_note
from model_optimizer.optimizer.deploy.kubernetes import (
    QUEUE_METRIC,
    SCRAPE_FILE,
    SCRAPE_KEY_FILE,
    SECRET,
    claim_access_mode,
    claim_file,
    claim_name,
    loader_file,
    loader_name,
)
from model_optimizer.optimizer.deploy.settings import MODEL_DIR, Mount, ServeSettings


def render_readme(
    settings: ServeSettings,
    deploy: DeployConfig,
    cuda: CudaChoice | None,
    command: list[str],
    untranslated: dict[str, str],
    kernels: KernelPlan,
    driver: str | None = None,
) -> str:
    port, image = settings.port, deploy.image
    lines = [
        f"# Deployment of {settings.model_name} ({deploy.engine}, {deploy.target})",
        "",
        "Rendered by `mopt deploy` from `settings.yaml`; render again rather than editing these files.",
        "",
        f"- Host: {_gpus_wanted(settings.num_gpus)} and driver. {driver_note(deploy, cuda, driver)}",
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
        lines += ["## Run", "", "```bash", *_docker_run(settings, deploy), "```", ""]
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
            *(
                ["- Another model folder: `MOPT_MODEL_DIR=/path docker compose up -d`"]
                if model_dir_overridable(settings.host_model_dir)
                else []
            ),
            f"- Terminal view: `mopt top --url http://localhost:{port}`",
            "",
        ]
    if deploy.target == "k8s":
        lines += [
            "## Run",
            "",
            "1. Push the image where the cluster pulls from and set `image:` in `k8s/deployment.yaml`.",
            *_copy_folder_steps(settings, deploy),
            _secret_step(settings.needs_api_key),
            "4. `kubectl apply -f k8s/`",
            f"5. Autoscaling on queue depth: install prometheus-adapter with `monitoring/prometheus-adapter-values.yaml`; "
            f"it serves `{QUEUE_METRIC}` (vllm:num_requests_waiting) per pod to the HPA.",
            _monitoring_step(settings.server.metrics_auth),
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


def _docker_run(settings: ServeSettings, deploy: DeployConfig) -> list[str]:
    """`docker run` with the GPUs, /dev/shm when the server's processes share it, the API key passed on
    from the host, and every folder the command names mounted read-only; each word shell-quoted."""
    port = settings.port
    argv = ["docker", "run", "--rm", "--gpus", str(settings.num_gpus)]
    if settings.shares_memory(deploy.engine):
        argv += ["--ipc", "host"]
    argv += ["-p", f"{port}:{port}"]
    first = shlex.join(argv)
    first += " -e MOPT_API_KEY" if deploy.engine == "mopt" else ' -e VLLM_API_KEY="$MOPT_API_KEY"'
    return [
        f"{first} \\",
        *(f"  --mount {shlex.quote(_bind_mount(m))} \\" for m in settings.mounts),
        f"  {shlex.quote(deploy.image)}",
    ]


def _bind_mount(mount: Mount) -> str:
    """--mount's value. Docker reads it as one CSV record, so a field holding a comma or a quote is quoted
    CSV's way; `-v HOST:TARGET:ro` instead would split a path at its colons, which it cannot escape."""
    record = io.StringIO()
    csv.writer(record, lineterminator="").writerow(
        ["type=bind", f"source={mount.host}", f"target={mount.target}", "readonly"]
    )
    return record.getvalue()


def _copy_folder_steps(settings: ServeSettings, deploy: DeployConfig) -> list[str]:
    """Step 2: for each folder the pods mount, its claim, a loader pod that mounts it writable, the copy,
    and the loader gone again."""
    cls = f"`{deploy.storage_class}`" if deploy.storage_class else "the cluster's default (`--storage-class`)"
    names = ", ".join(f"`{claim_name(m)}`" for m in settings.mounts)
    lines = [
        f"2. Copy each folder into the volume of its claim ({names}; {claim_access_mode(deploy)}: their storage "
        f"class, {cls}, must offer that mode or a claim stays Pending). Each loader pod mounts its claim "
        "writable as the server's uid; the servers mount them read-only:",
        "   ```bash",
    ]
    for mount in settings.mounts:
        loader = loader_name(mount)
        lines += [
            f"   kubectl apply -f {claim_file(mount)} -f {loader_file(mount)}",
            f"   kubectl wait --for=condition=Ready pod/{loader} --timeout=5m",
            f"   tar -C {shlex.quote(str(mount.host))} -cf - . | kubectl exec -i {loader} -- tar -xf - -C {mount.target}",
            f"   kubectl delete pod {loader}",
        ]
    return [*lines, "   ```"]


def _monitoring_step(metrics_auth: bool) -> str:
    """Step 6: how Prometheus finds the pods (their series need `namespace` and `pod` labels, which the
    adapter rule and the alerts read), and the alerts and dashboard."""
    rest = "load `monitoring/alerts.yml` into Prometheus and `monitoring/mopt-serving.json` into Grafana."
    if not metrics_auth:
        return (
            "6. Pods carry `prometheus.io/scrape` annotations (the scrape job must label series with `namespace` "
            f"and `pod`, as the adapter and alerts read them); {rest}"
        )
    return (
        "6. /metrics requires the API key (metrics_auth), so the pods' `prometheus.io/scrape` annotation is off "
        f"(a scrape without the key gets 401 and the HPA no data): add the job in `{SCRAPE_FILE}` to Prometheus' "
        f"scrape configs (Prometheus Operator: additionalScrapeConfigs) and mount the `{SECRET}` Secret into "
        f"Prometheus at `{SCRAPE_KEY_FILE.rsplit('/', 1)[0]}/` (Operator: list it in the Prometheus' "
        f"`spec.secrets`; the Secret must be in Prometheus' namespace too); {rest}"
    )


def _secret_step(required: bool) -> str:
    """Step 3, the API key's Secret. The pods read it through an optional secretKeyRef when the key is
    optional: a Secret created from an unset MOPT_API_KEY would hold an empty key, which `mopt serve`
    refuses at start, so it is created only with a key."""
    create = f'`kubectl create secret generic {SECRET} --from-literal=api-key="$MOPT_API_KEY"`'
    if required:
        return f"3. {create} (required: set MOPT_API_KEY to the key first; the pods do not start without it)"
    return (
        f"3. Only to require an API key: set MOPT_API_KEY to the key and run {create}. Without the Secret the "
        "server answers without a key; do not create it with an empty value (the server refuses an empty key)."
    )


def _api_key_note(required: bool) -> str:
    where = "the server reads it from the host's `MOPT_API_KEY`, passed on at start, never from these files"
    if required:
        return f"required: {where}; the containers do not start without it."
    return f"optional: {where}; unset, the server answers without a key."


def _gpus_wanted(count: int) -> str:
    if count == 1:
        return "an NVIDIA GPU"
    return f"{count} NVIDIA GPUs in one host (tensor_parallel_size {count}; NVLink keeps the all-reduces short)"
