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


def test_disable_fastapi_docs_serves_none_of_them(server_llm):
    import httpx

    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    live = start_server(server_llm, ServerConfig(disable_fastapi_docs=True))
    try:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(live.url + path, timeout=30).status_code == 404
        assert httpx.get(live.url + "/v1/models", timeout=30).status_code == 200
    finally:
        live.stop()
