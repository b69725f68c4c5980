"""The client against a real streaming server with known delays, and against failing ones."""

import socket

import numpy as np
import pytest

from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import RunPlan
from model_optimizer.optimizer.bench.metrics import summarize
from tests.optimizer.bench.conftest import ITL, TTFT
from tests.optimizer.bench.util import make_requests, run_plan

EARLY = 1e-3  # s: rounding; the server never answers sooner than its delays, and late is always allowed


def test_measured_ttft_and_itl_match_server_delays(server, valve):
    """Lower bounds only (a busy machine adds delay, never removes it), and the summary is made of
    exactly the measured chunk times."""
    records = run_plan(
        server.base_url, RunPlan("closed", concurrency=2, num_requests=6), make_requests(6, output_len=6)
    )
    assert all(r.ok for r in records)
    for r in records:
        assert r.output_tokens == 6 and r.usage_reported and r.prompt_tokens == 8
        assert len(r.chunk_times) == 6
        assert r.send <= r.chunk_times[0] and r.chunk_times == sorted(r.chunk_times) and r.chunk_times[-1] <= r.end
        for k, arrived in enumerate(r.chunk_times):  # chunk k leaves TTFT + k ITL after the request arrived
            assert arrived - r.send >= TTFT + k * ITL - EARLY
    s = summarize(records)
    ttfts = [r.ttft for r in records]
    gaps = [b - a for r in records for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    assert s["ttft_ms"]["p50"] == pytest.approx(np.median(ttfts) * 1e3)
    assert s["ttft_ms"]["max"] == pytest.approx(max(ttfts) * 1e3)
    assert min(ttfts) >= TTFT - EARLY
    assert s["itl_ms"]["count"] == 6 * 5 and s["itl_ms"]["p50"] == pytest.approx(np.median(gaps) * 1e3)
    tpots = [(r.e2e - r.ttft) / 5 for r in records]
    assert s["tpot_ms"]["mean"] == pytest.approx(np.mean(tpots) * 1e3)
    assert s["e2e_ms"]["p50"] == pytest.approx(np.median([r.e2e for r in records]) * 1e3)
    assert min(r.e2e for r in records) >= TTFT + 5 * ITL - EARLY
    assert len(valve.arrivals) == 6 and valve.max_in_flight <= 2


def test_connections_are_kept_alive(server):
    ports = server.app.state.client_ports
    start = len(ports)
    records = run_plan(server.base_url, RunPlan("closed", concurrency=3, num_requests=12), make_requests(12))
    assert all(r.ok for r in records)
    assert len(ports) - start == 12
    assert len(set(ports[start:])) == 3  # one connection per closed-loop slot, reused after [DONE]


def test_chat_role_chunk_is_not_the_first_token(server):
    records = run_plan(
        server.base_url,
        RunPlan("closed", concurrency=1, num_requests=2),
        make_requests(2, output_len=3),
        endpoint="chat",
    )
    assert all(r.ok and r.output_tokens == 3 for r in records)
    assert all(r.ttft >= TTFT - 0.005 for r in records)


def test_tokens_are_counted_from_chunks_without_usage(server):
    records = run_plan(
        server.base_url,
        RunPlan("closed", num_requests=2, concurrency=1),
        make_requests(2, output_len=5),
        model="no-usage",
    )
    assert all(r.ok and not r.usage_reported and r.output_tokens == 5 for r in records)


def test_embeddings(server):
    records = run_plan(
        server.base_url, RunPlan("closed", num_requests=3, concurrency=3), make_requests(3), endpoint="embeddings"
    )
    assert all(r.ok and r.prompt_tokens == 8 and r.output_tokens == 0 for r in records)
    assert all(r.e2e >= TTFT - EARLY for r in records)  # the server waits TTFT before answering


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


def test_timeout_and_connection_errors(server, valve):
    with valve.held():  # the server sends nothing after the headers until the valve opens
        records = run_plan(
            server.base_url, RunPlan("closed", num_requests=2, concurrency=2), make_requests(2), request_timeout=0.05
        )
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
        ClientConfig(endpoint="assistants")


def test_request_bodies_ask_for_streamed_usage():
    import json

    from model_optimizer.optimizer.bench.client import BenchClient
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    client = BenchClient(ClientConfig(model="m", temperature=0.5), 1, 0.0)
    body = json.loads(client.body(BenchRequest([1, 2], 2, 7)))
    assert body == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.5,
    }
    chat = BenchClient(ClientConfig(model="m", endpoint="chat", ignore_eos=False), 1, 0.0)
    body = json.loads(chat.body(BenchRequest("hi", 1, 3)))
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "ignore_eos" not in body


def test_reasoning_and_tool_call_deltas_are_tokens(server):
    """vLLM streams reasoning as `delta.reasoning` (`reasoning_content` before), and tool calls as name and
    argument fragments: every one of those chunks is generated output, so each is a timed token chunk."""
    records = run_plan(
        server.base_url,
        RunPlan("closed", concurrency=1, num_requests=1),
        make_requests(1, output_len=7),
        model="reasoning",
        endpoint="chat",
    )
    [rec] = records
    assert rec.ok and rec.output_tokens == 7
    # 3 reasoning chunks (one with both names), the tool call's name, its arguments, 2 answer chunks
    assert len(rec.chunk_times) == 7 and rec.chunk_tokens == [1] * 7


@pytest.mark.parametrize(
    ("model", "endpoint", "field"),
    [
        ("null-usage", "completions", "usage.completion_tokens"),
        ("bad-text", "completions", "text"),
        ("bad-delta", "chat", "delta"),
    ],
)
def test_a_malformed_field_fails_its_request_not_the_run(server, model, endpoint, field):
    records = run_plan(
        server.base_url,
        RunPlan("closed", concurrency=2, num_requests=2),
        make_requests(2),
        model=model,
        endpoint=endpoint,
    )
    assert [r.error for r in records] == ["malformed_stream"] * 2
    assert all(field in r.error_detail for r in records), records[0].error_detail


def test_an_error_field_of_null_is_no_stream_error(server):
    records = run_plan(
        server.base_url, RunPlan("closed", concurrency=1, num_requests=2), make_requests(2), model="error-null"
    )
    assert all(r.ok and r.output_tokens == 4 for r in records), [r.error_detail for r in records]


def test_request_timeout_bounds_the_whole_request(server):
    """A stream that never pauses for long (a chunk every ITL = 20 ms, 400 of them: at least 8 s) still
    times out at --request-timeout: it is a deadline for the whole request, not a wait between reads."""
    records = run_plan(
        server.base_url,
        RunPlan("closed", concurrency=1, num_requests=1),
        make_requests(1, output_len=400),
        request_timeout=2.0,
    )
    [rec] = records
    assert rec.error == "timeout" and "--request-timeout 2 s" in rec.error_detail
    assert 0 < len(rec.chunk_times) < 400  # chunks kept coming until the deadline cut the stream
