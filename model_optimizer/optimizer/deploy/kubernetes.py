"""Kubernetes manifests: a Deployment with its GPUs (one per tensor-parallel rank) and probes sized from the cold start, a Service,
a volume claim and a loader pod for each mounted folder (model, tokenizer, draft model), and an HPA on queue depth
(through prometheus-adapter, whose rule is written too)."""

from __future__ import annotations

import math

from model_optimizer.optimizer.deploy.compose import API_KEY_ENV, grace_seconds
from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.dockerfile import UID
from model_optimizer.optimizer.deploy.settings import Mount, ServeSettings

APP = "mopt-serve"
QUEUE_METRIC = "vllm_num_requests_waiting"
"""The HPA's per-pod metric: vllm:num_requests_waiting as prometheus-adapter names it (no colon)."""
STARTUP_PERIOD = 10
SECRET = f"{APP}-api-key"
"""The Secret holding the API key (key `api-key`), read by the pods and, behind --metrics-auth, by Prometheus."""
SCRAPE_FILE = "monitoring/prometheus-scrape-config.yaml"
"""Behind --metrics-auth: the scrape job that sends the key (monitoring.kubernetes_scrape_config)."""
SCRAPE_KEY_FILE = f"/etc/prometheus/secrets/{SECRET}/api-key"
"""Where the Prometheus Operator mounts a Secret listed in its Prometheus' spec.secrets."""


def _labels() -> dict:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/part-of": "model-optimizer"}


def _meta(name: str) -> dict:
    return {"name": name, "labels": _labels()}


def claim_name(mount: Mount) -> str:
    """The volume claim that holds `mount`'s folder: mopt-serve-model, mopt-serve-tokenizer, ..."""
    return f"{APP}-{mount.name}"


def loader_name(mount: Mount) -> str:
    """The pod that mounts claim_name(mount) writable for the copy."""
    return f"{claim_name(mount)}-loader"


def claim_file(mount: Mount) -> str:
    return f"k8s/{mount.name}-pvc.yaml"


def loader_file(mount: Mount) -> str:
    """Under k8s/setup/, so `kubectl apply -f k8s/` starts no loader."""
    return f"k8s/setup/{mount.name}-loader.yaml"


def _probe(path: str, period: int, failures: int) -> dict:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def deployment(settings: ServeSettings, deploy: DeployConfig, command: list[str]) -> dict:
    vllm = deploy.engine == "vllm"
    ready_path = "/health" if vllm else "/ready"  # vLLM has no /ready: /health answers once it serves
    startup_failures = math.ceil(deploy.cold_start * 1.5 / STARTUP_PERIOD)  # 50% headroom over the cold start
    mounts = [{"name": m.name, "mountPath": m.target, "readOnly": True} for m in settings.mounts]
    volumes = [
        {"name": m.name, "persistentVolumeClaim": {"claimName": claim_name(m), "readOnly": True}}
        for m in settings.mounts
    ]
    if settings.shares_memory(deploy.engine):  # worker processes share tensors through /dev/shm
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
    container = {
        "name": "server",
        "image": deploy.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "ports": [{"name": "http", "containerPort": settings.port, "protocol": "TCP"}],
        "env": [
            {
                "name": API_KEY_ENV[deploy.engine],
                "valueFrom": {
                    "secretKeyRef": {"name": SECRET, "key": "api-key", "optional": not settings.needs_api_key}
                },
            }
        ],
        "resources": {"limits": {"nvidia.com/gpu": settings.num_gpus}},
        "startupProbe": _probe(ready_path, STARTUP_PERIOD, startup_failures),
        "readinessProbe": _probe(ready_path, 5, 2),
        "livenessProbe": _probe("/health", 10, 3),
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},  # let endpoints drop the pod before SIGTERM
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    annotations = {
        # off behind --metrics-auth: an annotation-driven scrape sends no key and gets 401 (SCRAPE_FILE does)
        "prometheus.io/scrape": "false" if settings.server.metrics_auth else "true",
        "prometheus.io/port": str(settings.port),
        "prometheus.io/path": "/metrics",
    }
    pod = {
        "metadata": {"labels": _labels(), "annotations": annotations},
        "spec": {
            "terminationGracePeriodSeconds": grace_seconds(settings) + 5,
            "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
            "containers": [container],
            "volumes": volumes,
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(APP),
        "spec": {"replicas": deploy.min_replicas, "selector": {"matchLabels": _labels()}, "template": pod},
    }


def service(settings: ServeSettings) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(APP),
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(),
            "ports": [{"name": "http", "port": settings.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def claim_access_mode(deploy: DeployConfig) -> str:
    """ReadWriteMany when replicas may run on several nodes (the loader pod writes, every replica reads);
    ReadWriteOnce, which every storage class offers, when one replica runs."""
    return "ReadWriteMany" if deploy.max_replicas > 1 else "ReadWriteOnce"


def volume_claim(mount: Mount, deploy: DeployConfig) -> dict:
    """The claim that holds `mount`'s folder, sized from the folder on this host."""
    size_bytes = sum(f.stat().st_size for f in mount.host.rglob("*") if f.is_file())
    gib = max(1, math.ceil(size_bytes * 1.2 / 2**30))  # 20% room for a re-copy
    spec: dict = {"accessModes": [claim_access_mode(deploy)], "resources": {"requests": {"storage": f"{gib}Gi"}}}
    if deploy.storage_class:
        spec["storageClassName"] = deploy.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(claim_name(mount)), "spec": spec}


LOADER_IMAGE = "busybox:1.37"


def loader_pod(mount: Mount) -> dict:
    """A pod that mounts `mount`'s claim writable at the server's mount point, as the server's uid, for the
    README's `tar | kubectl exec` to fill; deleted after. The server's pods mount the same claim read-only."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(loader_name(mount)),
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
            "containers": [
                {
                    "name": "loader",
                    "image": LOADER_IMAGE,
                    "command": ["sleep", "86400"],  # a day to copy; `kubectl delete pod` when done
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": mount.name, "mountPath": mount.target}],
                }
            ],
            "volumes": [{"name": mount.name, "persistentVolumeClaim": {"claimName": claim_name(mount)}}],
        },
    }


def autoscaler(deploy: DeployConfig) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(APP),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
            "minReplicas": deploy.min_replicas,
            "maxReplicas": deploy.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(deploy.queue_target)},
                    },
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def adapter_values() -> dict:
    """Helm values for prometheus-adapter exposing the queue depth per pod to the HPA."""
    return {
        "rules": {
            "default": False,
            "custom": [
                {
                    "seriesQuery": 'vllm:num_requests_waiting{namespace!="",pod!=""}',
                    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                    "name": {"matches": "^vllm:num_requests_waiting$", "as": QUEUE_METRIC},
                    "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
                }
            ],
        }
    }
