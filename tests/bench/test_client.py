"""The client against a real streaming server with known delays, and against failing ones."""

import socket

import pytest

from model_optimizer.bench.client import ClientConfig
from model_optimizer.bench.load import RunPlan
from model_optimizer.bench.metrics import summarize
from tests.bench.conftest import ITL, TTFT
from tests.bench.util import make_requests, run_plan

# the server sleeps exactly TTFT / ITL; scheduling on a busy 2-core machine only adds delay
SLACK = 0.15


def test_measured_ttft_and_itl_match_server_delays(server):
    records = run_plan(server.base_url, RunPlan("closed", concurrency=2, num_requests=6), make_requests(6, output_len=6))
    assert all(r.ok for r in records)
    for r in records:
        assert r.ttft >= TTFT - 0.002  # the server never answers sooner than its delay
        assert r.output_tokens == 6 and r.usage_reported and r.prompt_tokens == 8
        assert len(r.chunk_times) == 6
    s = summarize(records)
    # on a quiet machine medians sit within a few ms of the delays; a busy one only adds delay
    assert s["ttft_ms"]["p50"] / 1e3 <= TTFT + SLACK / 2
    assert s["ttft_ms"]["max"] / 1e3 <= TTFT + SLACK
    assert ITL - 0.005 <= s["itl_ms"]["p50"] / 1e3 <= ITL + SLACK / 4
    assert ITL - 0.005 <= s["tpot_ms"]["mean"] / 1e3 <= ITL + SLACK / 4
    assert TTFT + 5 * ITL - 0.002 <= s["e2e_ms"]["p50"] / 1e3 <= TTFT + 5 * ITL + SLACK
    assert s["itl_ms"]["count"] == 6 * 5


def test_connections_are_kept_alive(server):
    ports = server.app.state.client_ports
    start = len(ports)
    records = run_plan(server.base_url, RunPlan("closed", concurrency=3, num_requests=12), make_requests(12))
    assert all(r.ok for r in records)
    assert len(ports) - start == 12
    assert len(set(ports[start:])) == 3  # one connection per closed-loop slot, reused after [DONE]


def test_chat_role_chunk_is_not_the_first_token(server):
    records = run_plan(server.base_url, RunPlan("closed", concurrency=1, num_requests=2),
                       make_requests(2, output_len=3), endpoint="chat")
    assert all(r.ok and r.output_tokens == 3 for r in records)
    assert all(r.ttft >= TTFT - 0.005 for r in records)


def test_tokens_are_counted_from_chunks_without_usage(server):
    records = run_plan(server.base_url, RunPlan("closed", num_requests=2, concurrency=1),
                       make_requests(2, output_len=5), model="no-usage")
    assert all(r.ok and not r.usage_reported and r.output_tokens == 5 for r in records)


def test_embeddings(server):
    records = run_plan(server.base_url, RunPlan("closed", num_requests=3, concurrency=3),
                       make_requests(3), endpoint="embeddings")
    assert all(r.ok and r.prompt_tokens == 8 and r.output_tokens == 0 for r in records)
    assert all(TTFT - 0.005 <= r.e2e <= TTFT + SLACK for r in records)


@pytest.mark.parametrize(
    ("model", "error"), [("fail-500", "http_500"), ("broken", "malformed_stream"), ("no-done", "malformed_stream")]
)
def test_failures_are_counted_by_type(server, model, error):
    records = run_plan(server.base_url, RunPlan("closed", concurrency=2, num_requests=4), make_requests(4), model=model)
    s = summarize(records)
    assert s["num_requests"] == 4 and s["num_failed"] == 4 and s["errors"] == {error: 4}
    assert s["request_rate"] == 0.0 and s["attempted_rate"] > 0
    if model == "fail-500":
        assert "internal error" in records[0].error_detail


def test_timeout_and_connection_errors(server):
    records = run_plan(server.base_url, RunPlan("closed", num_requests=2, concurrency=2), make_requests(2),
                       request_timeout=TTFT / 3)
    assert [r.error for r in records] == ["timeout", "timeout"]
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    records = run_plan(f"http://127.0.0.1:{port}", RunPlan("closed", num_requests=2, concurrency=1), make_requests(2))
    assert [r.error for r in records] == ["connection", "connection"]


def test_client_config_validation():
    assert ClientConfig(base_url="http://h:1/v1/").base_url == "http://h:1"
    with pytest.raises(ValueError, match="base_url must start with http"):
        ClientConfig(base_url="localhost:8000")
    with pytest.raises(ValueError, match="endpoint must be one of"):
        ClientConfig(endpoint="responses")


def test_request_bodies_ask_for_streamed_usage():
    import json

    from model_optimizer.bench.client import BenchClient
    from model_optimizer.bench.workloads import BenchRequest

    client = BenchClient(ClientConfig(model="m", temperature=0.5), 1, 0.0)
    body = json.loads(client.body(BenchRequest([1, 2], 2, 7)))
    assert body == {"model": "m", "prompt": [1, 2], "max_tokens": 7, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0.5}
    chat = BenchClient(ClientConfig(model="m", endpoint="chat", ignore_eos=False), 1, 0.0)
    body = json.loads(chat.body(BenchRequest("hi", 1, 3)))
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "ignore_eos" not in body
