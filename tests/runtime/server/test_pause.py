"""POST /pause, POST /resume, GET /is_paused (--enable-pause): generation holds without losing a request.

Every assertion is on state (the engine's step count and queues, the stream's events), never on
how much work fits in a time window.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server, wait_for

KEY = "sk-pause-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def pausable(tiny_model):
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=4)
    live = start_server(llm, ServerConfig(api_key=KEY, enable_pause=True))
    yield live
    live.stop()


def test_pause_endpoints_need_the_api_key(pausable):
    for method, path in (("POST", "/pause"), ("POST", "/resume"), ("GET", "/is_paused")):
        r = httpx.request(method, pausable.url + path, timeout=30)
        assert r.status_code == 401, (path, r.text)
    assert not pausable.state.engine.gate.is_held


def test_pause_endpoints_are_off_by_default(server):
    assert httpx.post(server.url + "/pause", timeout=30).status_code == 404
    assert httpx.get(server.url + "/is_paused", timeout=30).status_code == 404
    assert not server.state.engine.gate.is_held


def test_paused_engine_queues_a_request_then_runs_it_to_the_end_on_resume(pausable):
    engine = pausable.state.engine
    with httpx.Client(base_url=pausable.url, headers=AUTH, timeout=60) as client:
        assert client.post("/pause").json() == {"is_paused": True}
        assert client.get("/is_paused").json() == {"is_paused": True}
        steps, tokens = engine.gate.num_steps, engine.stats.num_generation_tokens
        out: dict = {}

        def stream() -> None:
            body = {"prompt": "hold me", "max_tokens": 20, "ignore_eos": True, "stream": True}
            body["stream_options"] = {"include_usage": True}
            with client.stream("POST", "/v1/completions", json=body) as r:
                out["status"] = r.status_code
                out["events"] = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]

        thread = threading.Thread(target=stream)
        thread.start()
        try:
            wait_for(lambda: engine.stats.num_waiting == 1, "the paused engine queued the request")
            assert engine.gate.wait_parked(30)  # the add is applied and no step runs
            assert engine.gate.num_steps == steps and engine.stats.num_generation_tokens == tokens
            assert pausable.state.num_admitted == 1 and "events" not in out
        finally:
            assert client.post("/resume").json() == {"is_paused": False}
        thread.join(60)
        assert client.get("/is_paused").json() == {"is_paused": False}
    assert out["status"] == 200 and out["events"][-1] == "[DONE]"
    chunks = [json.loads(e) for e in out["events"][:-1]]
    assert [c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]] == ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == 20
    wait_for(lambda: pausable.state.num_admitted == 0, "the request's room was released")


def test_pause_mid_request_stops_steps_and_keeps_the_request(pausable):
    engine = pausable.state.engine
    body = {"prompt": "long", "max_tokens": 100, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=pausable.url, headers=AUTH, timeout=60) as client:
        with engine.gate.held():  # the request cannot finish before /pause, however fast the machine
            with client.stream("POST", "/v1/completions", json=body) as r:
                wait_for(lambda: engine.stats.num_waiting + engine.stats.num_running == 1, "the request is queued")
                assert engine.gate.step(3, 30) == 3
                assert client.post("/pause").json() == {"is_paused": True}  # held already: stays held
                steps = engine.gate.num_steps
                assert client.get("/is_paused").json() == {"is_paused": True}
                assert engine.gate.wait_parked(30) and engine.gate.num_steps == steps
                assert engine.stats.num_running == 1  # paused, not dropped
                assert client.post("/resume").json() == {"is_paused": False}
                events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    finishes = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"] if c["finish_reason"]]
    assert finishes == ["length"]
