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


def test_a_failed_responses_stream_ends_with_response_failed(nan_server):
    """OpenAI's way: a response.failed event with the response so far and the reason, and no [DONE]."""
    from openai.types.responses import ResponseFailedEvent

    tokenizer = nan_server.state.model.tokenizer
    text = tokenizer.decode([BAD_TOKEN])
    assert BAD_TOKEN in tokenizer.encode(text, add_special_tokens=False)
    body = {"input": text, "max_output_tokens": 4, "stream": True}
    r = httpx.post(nan_server.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200
    events = [block for block in r.text.split("\n\n") if block.strip()]
    assert not any(block.endswith("[DONE]") for block in events)
    name, data = events[-1].split("\n")
    failed = ResponseFailedEvent.model_validate_json(data[len("data: ") :])
    assert name == "event: response.failed" and failed.response.status == "failed"
    assert failed.response.error.code == "server_error" and NONFINITE_ERROR in failed.response.error.message
    assert [json.loads(b.split("\n")[1][6:])["sequence_number"] for b in events] == list(range(len(events)))
    wait_for(lambda: nan_server.state.num_admitted == 0, "the group was closed and its room released")
