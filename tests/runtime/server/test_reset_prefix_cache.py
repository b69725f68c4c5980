"""POST /reset_prefix_cache (vLLM's route; served with --enable-pause, as vLLM serves it only in dev mode): the
next identical prompt reports no cached tokens, the prefix-cache counters go on, a request still running keeps
its blocks and the answer says so; with the core in a thread of the server and in a process of its own.

Every wait is for a state (a stream's first token, a pause), never for a time."""

from __future__ import annotations

import json

import httpx
import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import metric, start_server

KEY = "sk-reset-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
ENGINE_ARGS = dict(max_model_len=128, num_kv_blocks=64, max_num_seqs=4)
PROMPT = [(i * 37) % 900 + 5 for i in range(40)]


@pytest.fixture(scope="module", params=["thread", "process"])
def live(request, tiny_model):
    """A server with the engine core in a thread of its own process, or in an engine-core process."""
    config = ServerConfig(api_key=KEY, enable_pause=True, enable_prompt_tokens_details=True)
    model = str(tiny_model("qwen3"))
    if request.param == "thread":
        from model_optimizer import LLM

        server = start_server(LLM(model, **ENGINE_ARGS), config)
    else:
        server = start_server(None, config, engine_config=EngineConfig(model=model, **ENGINE_ARGS))
    assert (server.state.core is not None) == (request.param == "process")
    yield server
    server.stop()


def cached_tokens(client: httpx.Client) -> int:
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def prefix_cache_hits(client: httpx.Client) -> float:
    return metric(client.get("/metrics").text, "vllm:prefix_cache_hits_total")


def test_the_same_prompt_misses_after_a_reset_and_the_counters_go_on(live):
    with httpx.Client(base_url=live.url, headers=AUTH, timeout=60) as client:
        assert client.post("/reset_prefix_cache").json() == {"reset": True}
        assert cached_tokens(client) == 0
        assert cached_tokens(client) > 0
        hits = prefix_cache_hits(client)

        r = client.post("/reset_prefix_cache")
        assert r.status_code == 200 and r.json() == {"reset": True}
        assert cached_tokens(client) == 0
        assert prefix_cache_hits(client) == hits  # a reset zeroes no counter
        assert cached_tokens(client) > 0  # the prompt is cached afresh


def test_a_running_request_keeps_its_blocks_and_the_answer_says_so(live):
    body = {"prompt": PROMPT, "max_tokens": 40, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=live.url, headers=AUTH, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # its prompt is computed and cached
            assert client.post("/pause").json() == {"is_paused": True}  # it cannot finish meanwhile
            try:
                assert client.post("/reset_prefix_cache").json() == {"reset": False}
            finally:
                assert client.post("/resume").json() == {"is_paused": False}
            events = [line[6:] for line in lines if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        assert cached_tokens(client) > 0  # the running request's blocks stayed cached
        assert client.post("/reset_prefix_cache").json() == {"reset": True}
        assert cached_tokens(client) == 0


def test_the_route_needs_the_key_and_refuses_what_it_cannot_do(live):
    assert httpx.post(live.url + "/reset_prefix_cache", timeout=30).status_code == 401
    with httpx.Client(base_url=live.url, headers=AUTH, timeout=60) as client:
        r = client.post("/reset_prefix_cache", params={"reset_running_requests": "true"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "reset_running_requests"
        live.state.draining = True
        try:
            r = client.post("/reset_prefix_cache")
        finally:
            live.state.draining = False
        assert r.status_code == 503 and "Retry-After" in r.headers


def test_the_route_is_off_without_enable_pause(server):
    assert httpx.post(server.url + "/reset_prefix_cache", timeout=30).status_code == 404
