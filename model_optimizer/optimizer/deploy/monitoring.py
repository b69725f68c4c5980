"""Prometheus scrape config and alert rules, and the Grafana datasource, dashboard provider and dashboard.

Every query reads vLLM's metric names, which our /metrics exports too (tests/optimizer/deploy checks each name
against a live server), so the same files watch `mopt serve` and `vllm serve`. GPU panels read the
NVIDIA DCGM exporter's metrics.
"""

from __future__ import annotations

import json

from model_optimizer.optimizer.deploy.settings import ServeSettings

DATASOURCE_UID = "prometheus"
DASHBOARD_UID = "mopt-serving"
API_KEY_FILE = "/run/secrets/mopt_api_key"
SEL = '{model_name=~"$model_name"}'

GPU_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP")
"""What the dashboard reads from the DCGM exporter (utilisation %, framebuffer MiB used, watts, degrees C)."""


def prometheus_config(settings: ServeSettings, server_target: str, gpu_target: str | None) -> dict:
    """prometheus.yml: scrape the server's /metrics (with the API key when metrics auth is on) and the GPU exporter."""
    job: dict = {"job_name": "mopt", "metrics_path": "/metrics", "static_configs": [{"targets": [server_target]}]}
    if settings.server.metrics_auth:
        job["authorization"] = {"type": "Bearer", "credentials_file": API_KEY_FILE}
    jobs = [job]
    if gpu_target:
        jobs.append({"job_name": "dcgm", "static_configs": [{"targets": [gpu_target]}]})
    return {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": ["/etc/prometheus/alerts.yml"],
        "scrape_configs": jobs,
    }


def kubernetes_scrape_config(app: str, key_file: str) -> dict:
    """A scrape job for the pods when /metrics needs the API key (--metrics-auth): the pods' prometheus.io
    annotations are then off, as an annotation-driven scrape sends no key, gets 401 and leaves the HPA and the
    dashboard without data. It finds the pods by their app label and named port, sends the key from the
    Secret mounted into Prometheus at `key_file`, and labels each series with its namespace and pod, as
    prometheus-adapter and the alerts read them."""
    return {
        "scrape_configs": [
            {
                "job_name": "mopt",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials_file": key_file},
                "kubernetes_sd_configs": [{"role": "pod"}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                        "regex": app,
                        "action": "keep",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http", "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }
        ]
    }


def _down_rules(pod_prefix: str | None) -> list[dict]:
    """The server cannot be scraped. Compose: its `mopt` job's target is down. Kubernetes: pods are found by
    whatever job the cluster's Prometheus runs (the annotation-driven one is not called `mopt`, so
    `up{job="mopt"}` never matched there), and each series carries its `pod` label (as the HPA's adapter
    rule requires): a server pod that does not answer its scrape, or no server pod answering at all (every
    replica gone or crash-looping out of discovery)."""
    annotations = {"description": "The server is down or /metrics refuses the scrape."}
    if pod_prefix is None:
        return [
            {
                "alert": "MoptDown",
                "expr": 'up{job="mopt"} == 0',
                "for": "2m",
                "labels": {"severity": "critical"},
                "annotations": {"summary": "Prometheus cannot scrape {{ $labels.instance }}", **annotations},
            }
        ]
    pods = f'up{{pod=~"{pod_prefix}-.*"}}'
    return [
        {
            "alert": "MoptDown",
            "expr": f"{pods} == 0",
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {"summary": "Prometheus cannot scrape pod {{ $labels.pod }}", **annotations},
        },
        {
            "alert": "MoptAllDown",
            "expr": f"absent({pods} == 1)",
            "for": "5m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"No {pod_prefix} pod answers Prometheus' scrape",
                "description": "Every replica is down, not ready to be scraped, or gone.",
            },
        },
    ]


def _quantile(q: float, metric: str, window: str = "5m", offset: str = "") -> str:
    return (
        f"histogram_quantile({q}, sum by (le, model_name) "
        f"(rate({metric}_bucket[{window}]{' offset ' + offset if offset else ''})))"
    )


def _rising(name: str, metric: str, what: str, floor: float) -> dict:
    now, before = _quantile(0.99, metric), _quantile(0.99, metric, "1h", "1h")
    return {
        "alert": name,
        "expr": f"{now} > 2 * {before} and {now} > {floor}",
        "for": "10m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": f"p99 {what} of {{{{ $labels.model_name }}}} doubled against an hour ago",
            "description": f"p99 {what} is {{{{ $value | humanizeDuration }}}} over the last 5 minutes.",
        },
    }


def alert_rules(pod_prefix: str | None = None) -> dict:
    """alerts.yml: a stuck queue, rising p99 latencies, a full KV cache, a server Prometheus cannot scrape
    (Compose's `mopt` job; on Kubernetes, the pods named `pod_prefix`-...: see _down_rules)."""
    stuck = (
        "max by (model_name) (vllm:num_requests_waiting) > 0 and on (model_name) "
        "sum by (model_name) (rate(vllm:generation_tokens_total[5m])) == 0"
    )
    rules = [
        {
            "alert": "MoptQueueStuck",
            "expr": stuck,
            "for": "5m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Requests wait but {{ $labels.model_name }} generates no tokens",
                "description": "{{ $value }} requests have waited for 5 minutes with no token generated.",
            },
        },
        _rising("MoptTTFTP99Rising", "vllm:time_to_first_token_seconds", "time to first token", 0.5),
        _rising("MoptE2EP99Rising", "vllm:e2e_request_latency_seconds", "request latency", 5.0),
        {
            "alert": "MoptKVCacheFull",
            "expr": "max by (model_name) (vllm:kv_cache_usage_perc) > 0.95 and on "
            "(model_name) sum by (model_name) (rate(vllm:num_preemptions_total[5m])) > 0",
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "KV cache of {{ $labels.model_name }} is full and requests are preempted",
                "description": "Lower max_num_seqs or add replicas: preempted requests are recomputed.",
            },
        },
        *_down_rules(pod_prefix),
    ]
    return {"groups": [{"name": "mopt-serving", "rules": rules}]}


def grafana_datasource(prometheus_url: str) -> dict:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": prometheus_url,
                "isDefault": True,
                "editable": False,
            }
        ],
    }


def grafana_dashboard_provider(path: str) -> dict:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "mopt",
                "orgId": 1,
                "folder": "Model-Optimizer",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": path},
            }
        ],
    }


def _latency(title: str, metric: str) -> tuple[str, str, list[tuple[str, str]]]:
    return (
        title,
        "s",
        [
            (f"p{int(q * 100)}", f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{SEL}[$__rate_interval])))")
            for q in (0.5, 0.9, 0.99)
        ],
    )


def _rate(metric: str) -> str:
    return f"sum(rate({metric}{SEL}[$__rate_interval]))"


PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "Requests finished / s",
        "reqps",
        [
            (
                "{{finished_reason}}",
                f"sum by (finished_reason) (rate(vllm:request_success_total{SEL}[$__rate_interval]))",
            )
        ],
    ),
    (
        "Running and waiting requests",
        "short",
        [("running", f"sum(vllm:num_requests_running{SEL})"), ("waiting", f"sum(vllm:num_requests_waiting{SEL})")],
    ),
    _latency("Time to first token", "vllm:time_to_first_token_seconds"),
    # each request's mean decode time per token: vLLM 0.14 (the pinned image) exports no other TPOT histogram
    _latency("Time per output token", "vllm:request_time_per_output_token_seconds"),
    _latency("Inter-token latency", "vllm:inter_token_latency_seconds"),
    _latency("End-to-end request latency", "vllm:e2e_request_latency_seconds"),
    _latency("Queue time", "vllm:request_queue_time_seconds"),
    (
        "Tokens / s",
        "short",
        [("prompt", _rate("vllm:prompt_tokens_total")), ("generation", _rate("vllm:generation_tokens_total"))],
    ),
    ("KV-cache usage", "percentunit", [("usage", f"max(vllm:kv_cache_usage_perc{SEL})")]),
    (
        "Prefix-cache hit rate",
        "percentunit",
        [("hit rate", f"{_rate('vllm:prefix_cache_hits_total')} / {_rate('vllm:prefix_cache_queries_total')}")],
    ),
    ("Preemptions / s", "short", [("preemptions", _rate("vllm:num_preemptions_total"))]),
    ("GPU utilisation", "percent", [("GPU {{gpu}}", "avg by (gpu) (DCGM_FI_DEV_GPU_UTIL)")]),
    ("GPU memory used", "decmbytes", [("GPU {{gpu}}", "max by (gpu) (DCGM_FI_DEV_FB_USED)")]),
    ("GPU power", "watt", [("GPU {{gpu}}", "max by (gpu) (DCGM_FI_DEV_POWER_USAGE)")]),
    ("GPU temperature", "celsius", [("GPU {{gpu}}", "max by (gpu) (DCGM_FI_DEV_GPU_TEMP)")]),
]
"""(title, unit, [(legend, PromQL)]) for each dashboard panel, two per row."""


def grafana_dashboard() -> dict:
    datasource = {"type": "prometheus", "uid": DATASOURCE_UID}
    panels = []
    for i, (title, unit, queries) in enumerate(PANELS):
        targets = [
            {"refId": chr(ord("A") + j), "datasource": datasource, "expr": expr, "legendFormat": legend}
            for j, (legend, expr) in enumerate(queries)
        ]
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": datasource,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"},
                },
                "targets": targets,
            }
        )
    model_var = {
        "name": "model_name",
        "label": "Model",
        "type": "query",
        "datasource": datasource,
        "query": {"query": "label_values(vllm:num_requests_running, model_name)", "refId": "models"},
        "definition": "label_values(vllm:num_requests_running, model_name)",
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "options": [],
        "sort": 1,
    }
    return {
        "uid": DASHBOARD_UID,
        "title": "Model-Optimizer serving",
        "tags": ["mopt", "vllm", "llm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "panels": panels,
        "templating": {"list": [model_var]},
        "annotations": {"list": []},
    }


def dashboard_json() -> str:
    return json.dumps(grafana_dashboard(), indent=2) + "\n"
