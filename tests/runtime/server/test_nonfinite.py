"""A request whose logits turn NaN fails alone: 500 with the engine's message, or, once streaming, an
error event then [DONE]; the server and other requests go on (the engine's NaN checkpoint)."""

from __future__ import annotations

import json

import httpx
import pytest

from model_optimizer.runtime.engine.request import NONFINITE_ERROR
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.engine.test_nonfinite import BAD_TOKEN, nan_model  # noqa: F401 - the fixture
from tests.runtime.server.live import start_server, wait_for
from tests.runtime.server.test_errors import assert_error


@pytest.fixture(scope="module")
def nan_server(nan_model):  # noqa: F811 - the imported fixture
    from model_optimizer import LLM

    live = start_server(LLM(nan_model, max_model_len=128, num_kv_blocks=64), ServerConfig())
    yield live
    live.stop()


def test_nan_request_is_500_with_the_engine_message(nan_server):
    body = {"prompt": [5, BAD_TOKEN, 11], "max_tokens": 4, "ignore_eos": True}
    error = assert_error(httpx.post(nan_server.url + "/v1/completions", json=body, timeout=60), 500, NONFINITE_ERROR)
    assert error["type"] == "server_error"
    r = httpx.post(nan_server.url + "/v1/completions", json={**body, "n": 2}, timeout=60)
    assert_error(r, 500, NONFINITE_ERROR)
    clean = httpx.post(nan_server.url + "/v1/completions", json={**body, "prompt": [5, 6, 11]}, timeout=60)
    assert clean.status_code == 200 and clean.json()["choices"][0]["finish_reason"] == "length"


def test_nan_stream_ends_with_error_event_then_done(nan_server):
    body = {"prompt": [[5, 6, 11], [5, BAD_TOKEN, 11]], "max_tokens": 4, "ignore_eos": True, "stream": True}
    r = httpx.post(nan_server.url + "/v1/completions", json=body, timeout=60)
    events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == 500 and NONFINITE_ERROR in error["message"]
    assert all("error" not in json.loads(e) for e in events[:-2])
    # the response closes its group after the last byte is sent: the client may read [DONE] first
    wait_for(lambda: nan_server.state.num_admitted == 0, "the group was closed and its room released")
