"""Big bodies are decoded and validated off the event loop (runtime/server/body.py): other clients are
answered meanwhile. The proofs order events, never time them: the server's worker threads are replaced
by ones that record (and may hold) each job, so /health is asked while a body's parsing is provably
unfinished."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from model_optimizer.runtime.server.body import INLINE_BYTES
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import CAPS
from tests.runtime.server.live import HeldExecutor, start_server

WAIT = 30.0  # seconds; only a bound on a hang
BIG = {**CAPS, "max_body_bytes": 16 << 20}


@pytest.fixture(scope="module")
def own_llm(tiny_model):
    from model_optimizer import LLM
    from tests.runtime.server.conftest import ENGINE_ARGS

    return LLM(str(tiny_model("qwen3")), **ENGINE_ARGS)


@pytest.fixture
def held_server(own_llm):
    """A server whose worker threads are a HeldExecutor: make(hold) -> (server, executor)."""
    made = []

    def make(hold: bool):
        live = start_server(own_llm, ServerConfig(served_model_name="tiny", **BIG))
        executor = HeldExecutor(hold)
        live.state.executor.shutdown()
        live.state.executor = executor
        made.append((live, executor))
        return live, executor

    yield make
    for live, executor in made:
        executor.proceed.set()
        live.stop()
        executor.shutdown()


def post_in_thread(url: str, path: str, body: bytes, events: list, result: dict) -> threading.Thread:
    def send() -> None:
        r = httpx.post(url + path, content=body, headers={"Content-Type": "application/json"}, timeout=WAIT * 4)
        result["status"], result["body"] = r.status_code, r.json()
        events.append("big answered")

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def token_id_body(num_ids: int) -> bytes:
    return json.dumps({"model": "tiny", "prompt": [7] * num_ids, "max_tokens": 1}).encode()


def chat_body(num_messages: int) -> bytes:
    messages = [{"role": "user", "content": "hi"}] * num_messages
    return json.dumps({"model": "tiny", "messages": messages, "max_tokens": 1}).encode()


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", token_id_body(100_000)),  # /health waited seconds behind such bodies before
        ("/v1/chat/completions", chat_body(20_000)),  # tiny messages, many of them
    ],
    ids=["token-ids", "chat"],
)
def test_a_big_body_is_parsed_in_a_worker_while_health_answers(held_server, path, body):
    """The body's parsing is held unfinished in its worker thread while /health is asked: it must answer
    every time (the event loop is free), then the request is refused once parsed (max_model_len 128)."""
    live, held = held_server(hold=True)
    assert len(body) > INLINE_BYTES
    events: list = []
    result: dict = {}
    thread = post_in_thread(live.url, path, body, events, result)
    try:
        assert held.entered.wait(WAIT), "the body never reached the worker threads"
        assert held.started == ["parse_body"]
        with httpx.Client(timeout=WAIT) as client:
            for _ in range(5):  # each answered while the body's parsing is still unfinished
                assert client.get(f"{live.url}/health").status_code == 200
                assert not held.results and thread.is_alive()
        held.proceed.set()
        thread.join(WAIT * 4)
        assert result["status"] == 400, result
        assert "max_model_len is 128" in result["body"]["error"]["message"]
    finally:
        held.proceed.set()
        thread.join(WAIT * 4)


def test_big_lists_validated_in_slices_keep_their_indices_and_caps(own_llm):
    live = start_server(own_llm, ServerConfig(served_model_name="tiny", **BIG))
    try:
        ids = [7] * 100_000
        ids[90_000] = -1
        r = httpx.post(f"{live.url}/v1/completions", json={"model": "tiny", "prompt": ids}, timeout=WAIT)
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "prompt", error
        assert error["message"].startswith("prompt.token_ids.90000: Input should be greater than or equal to 0")
        r = httpx.post(f"{live.url}/v1/completions", json={"model": "tiny", "prompt": 5}, timeout=WAIT)
        assert r.status_code == 400 and "a list of token ids" in r.json()["error"]["message"]
        r = httpx.post(f"{live.url}/detokenize", json={"tokens": [7] * ((1 << 20) + 1)}, timeout=WAIT)
        assert r.status_code == 400 and "1048576" in r.json()["error"]["message"], r.text
        r = httpx.post(f"{live.url}/detokenize", json={"tokens": [7] * 5000}, timeout=WAIT)
        assert r.status_code == 200 and r.json()["prompt"]
    finally:
        live.stop()
