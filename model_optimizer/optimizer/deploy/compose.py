"""docker-compose.yml: the server with its GPUs reserved (one per tensor-parallel rank), a DCGM GPU
exporter, Prometheus and Grafana."""

from __future__ import annotations

import math

from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.settings import Mount, ServeSettings

PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0"
GRAFANA_IMAGE = "grafana/grafana:12.1.0"
DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
DCGM_PORT = 9400
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
"""Host ports Compose publishes for Prometheus and Grafana, beside the server's own."""
API_KEY_ENV = {"mopt": "MOPT_API_KEY", "vllm": "VLLM_API_KEY"}


def host_api_key(required: bool) -> str:
    """The server's API key from the host's MOPT_API_KEY, as Compose interpolates it: required, `up`
    refuses to start without it; optional, an unset variable passes an empty key, which vLLM reads as
    none (our server refuses an empty key: server_environment leaves its variable out instead)."""
    return "${MOPT_API_KEY:?set MOPT_API_KEY to the API key}" if required else "${MOPT_API_KEY:-}"


def server_environment(engine: str, required: bool) -> dict:
    """The server's environment: its API-key variable from the host's MOPT_API_KEY. Our server with an
    optional key gets `MOPT_API_KEY:` with no value, which Compose fills from the shell or .env when set
    and otherwise leaves out of the container: `mopt serve` refuses an empty key, so `${MOPT_API_KEY:-}`
    made the default deployment restart forever."""
    if engine == "mopt" and not required:
        return {API_KEY_ENV[engine]: None}
    return {API_KEY_ENV[engine]: host_api_key(required)}


def grace_seconds(settings: ServeSettings) -> int:
    """Stop grace: the server's drain timeout plus room for the last responses and the exit."""
    return math.ceil(settings.server.shutdown_timeout) + 15


def _gpu(count: int | str) -> dict:
    return {"resources": {"reservations": {"devices": [{"driver": "nvidia", "count": count, "capabilities": ["gpu"]}]}}}


def model_dir_overridable(model_dir: object) -> bool:
    """Whether the model's mount can be `${MOPT_MODEL_DIR:-<path>}`: Compose ends the default at the first
    `}` and has no escape for it, so a path holding one is written as it is, without the override."""
    return "}" not in str(model_dir)


def _volume(mount: Mount) -> dict:
    """A read-only bind mount of an absolute host path (Compose would resolve a relative one against the
    deployment folder), the model's overridable with MOPT_MODEL_DIR where its path allows. Compose
    interpolates `$` even inside the default, so a `$` in a path is written `$$`."""
    source = str(mount.host).replace("$", "$$")
    if mount.name == "model" and model_dir_overridable(mount.host):
        source = f"${{MOPT_MODEL_DIR:-{source}}}"
    return {"type": "bind", "source": source, "target": mount.target, "read_only": True}


def check_port(port: int) -> None:
    """ValueError when the server's port is one Compose also publishes for Prometheus or Grafana: the host
    port would be mapped twice and `up` would fail to bind it."""
    taken = {PROMETHEUS_PORT: "Prometheus", GRAFANA_PORT: "Grafana"}
    if port in taken:
        raise ValueError(
            f"--port {port}: docker-compose.yml publishes host port {port} for {taken[port]} too, so the two would "
            f"clash; give the server another port (not {PROMETHEUS_PORT} or {GRAFANA_PORT})"
        )


def compose_file(settings: ServeSettings, deploy: DeployConfig) -> dict:
    port = settings.port
    check_port(port)
    server: dict = {
        "build": {"context": ".", "dockerfile": "Dockerfile"},
        "image": deploy.image,
        "ports": [f"{port}:{port}"],
        "volumes": [_volume(mount) for mount in settings.mounts],
        "deploy": _gpu(settings.num_gpus),
        "stop_grace_period": f"{grace_seconds(settings)}s",
        "restart": "unless-stopped",
    }
    server["environment"] = server_environment(deploy.engine, settings.needs_api_key)
    if settings.shares_memory(deploy.engine):
        server["ipc"] = "host"  # worker processes (vLLM's, or tensor-parallel ranks) share tensors through /dev/shm
    prometheus: dict = {
        "image": PROMETHEUS_IMAGE,
        "ports": [f"{PROMETHEUS_PORT}:9090"],
        "depends_on": ["server"],
        "restart": "unless-stopped",
        "command": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.retention.time=15d"],
        "volumes": ["./prometheus:/etc/prometheus:ro", "prometheus-data:/prometheus"],
    }
    compose: dict = {
        "services": {
            "server": server,
            "dcgm-exporter": {
                "image": DCGM_IMAGE,
                "cap_add": ["SYS_ADMIN"],
                "deploy": _gpu("all"),
                "restart": "unless-stopped",
            },
            "prometheus": prometheus,
            "grafana": {
                "image": GRAFANA_IMAGE,
                "ports": [f"{GRAFANA_PORT}:3000"],
                "depends_on": ["prometheus"],
                "restart": "unless-stopped",
                "environment": {"GF_SECURITY_ADMIN_PASSWORD": "${GRAFANA_ADMIN_PASSWORD:-admin}"},
                "volumes": [
                    "./grafana/provisioning:/etc/grafana/provisioning:ro",
                    "./grafana/dashboards:/var/lib/grafana/dashboards:ro",
                    "grafana-data:/var/lib/grafana",
                ],
            },
        },
        "volumes": {"prometheus-data": {}, "grafana-data": {}},
    }
    if settings.server.metrics_auth:
        prometheus["secrets"] = ["mopt_api_key"]
        compose["secrets"] = {"mopt_api_key": {"environment": "MOPT_API_KEY"}}
    return compose
