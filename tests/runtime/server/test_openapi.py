"""/openapi.json documents what the routes really answer: bare /health, text /metrics, /ready's 503."""

from __future__ import annotations


def test_openapi_documents_health_metrics_and_new_routes(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    health = paths["/health"]["get"]["responses"]["200"]
    assert "application/json" not in health.get("content", {})
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
    for path in ("/tokenize", "/detokenize", "/v1/models/{model_id}"):
        assert path in paths
    assert client.get("/health").content == b""


def test_openapi_documents_ready_503(client):
    responses = client.get("/openapi.json").json()["paths"]["/ready"]["get"]["responses"]
    assert "503" in responses
    assert responses["200"]["content"]["application/json"]["schema"] != {}
