"""use_beam_search over HTTP: the offline API's beams as choices, streamed or not; refusals; a client that
leaves aborts the step's requests and frees their blocks."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest

from model_optimizer import BeamSearchParams
from tests.runtime.server.live import sse_payloads, wait_for
from tests.runtime.server.test_disconnect import aborted_count, scrape, wait_idle
from tests.runtime.server.test_errors import assert_error

PROMPT = [5, 17, 42, 8, 99, 3]
BEAMS = {"use_beam_search": True, "n": 3, "temperature": 0, "ignore_eos": True, "max_tokens": 5}


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def offline_beams(llm, prompt: list[int], width: int, max_tokens: int) -> list:
    params = BeamSearchParams(beam_width=width, max_tokens=max_tokens, ignore_eos=True)
    return llm.beam_search([{"prompt_token_ids": prompt}], params)[0].sequences


def test_completion_choices_are_the_offline_beams_best_first(client, qwen3_llm):
    body = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, **BEAMS}).json()
    expected = offline_beams(qwen3_llm, PROMPT, 3, 5)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["text"] for c in body["choices"]] == [s.text for s in expected]
    assert {c["finish_reason"] for c in body["choices"]} == {"length"}
    assert body["usage"]["prompt_tokens"] == len(PROMPT) and body["usage"]["completion_tokens"] == 15


def test_streamed_beams_equal_the_whole_response(client):
    whole = client.post("/v1/completions", json={"prompt": PROMPT, **BEAMS, "return_token_ids": True}).json()
    request = {"prompt": PROMPT, **BEAMS, "stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/completions", json=request) as response:
        response.read()
    payloads = sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    texts = ["", "", ""]
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] += choice["text"]
    assert texts == [c["text"] for c in whole["choices"]]
    assert chunks[-1]["usage"]["completion_tokens"] == 15


def test_chat_through_the_openai_client(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    reply = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        n=2,
        max_tokens=4,
        temperature=0,
        extra_body={"use_beam_search": True, "ignore_eos": True, "length_penalty": 0.5},
    )
    assert len(reply.choices) == 2 and all(c.finish_reason == "length" for c in reply.choices)
    assert reply.choices[0].message.content != reply.choices[1].message.content
    assert reply.usage.completion_tokens == 8


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"logprobs": 2}, "logprobs does not apply"),
        ({"stop": ["x"]}, "stop does not apply"),
        ({"top_p": 0.5}, "top_p does not apply"),
        ({"repetition_penalty": 1.2}, "repetition_penalty does not apply"),
        ({"structured_outputs": {"choice": ["a", "b"]}}, "structured_outputs does not apply"),
        ({"response_format": {"type": "json_object"}}, "response_format does not apply"),
        ({"length_penalty": 11}, "length_penalty"),
        ({"max_tokens": 0, "echo": True}, "max_tokens 0"),
    ],
)
def test_fields_beam_search_does_not_apply_are_refused(client, extra, fragment):
    error = assert_error(client.post("/v1/completions", json={"prompt": PROMPT, **BEAMS, **extra}), 400, fragment)
    assert error["param"] in extra


def test_defaults_sent_explicitly_are_not_refused(client):
    response = client.post("/v1/completions", json={"prompt": PROMPT, **BEAMS, "top_p": 1.0, "min_tokens": 0})
    assert response.status_code == 200 and len(response.json()["choices"]) == 3


def test_a_client_that_leaves_aborts_the_search(server):
    before = wait_idle(server)
    engine = server.state.engine
    request = {"prompt": PROMPT, **BEAMS, "max_tokens": 60, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=request, timeout=30) as response:
        assert response.status_code == 200
        wait_for(lambda: engine.num_in_flight > 0, "a beam step reached the engine")
    after = wait_idle(server)
    assert metric_free(after) and server.state.num_admitted == 0
    assert aborted_count(after) - aborted_count(before) == 3  # one per beam the client asked for
    assert scrape(server.url)  # and the server still answers


def metric_free(text: str) -> bool:
    from tests.runtime.server.live import metric

    return metric(text, "mopt:kv_cache_free_blocks") == metric(text, "mopt:kv_cache_total_blocks")


def test_an_engine_abort_mid_search_ends_it_as_aborted(server):
    """What a drain out of time does (abort_all): each beam finishes "abort", not a 500, whether the abort
    finds a step's requests in flight or lands between two steps (none in flight)."""
    engine = server.state.engine
    result = {}

    def send() -> None:
        body = {"prompt": PROMPT, **BEAMS, "max_tokens": 60}
        result["response"] = httpx.post(server.url + "/v1/completions", json=body, timeout=60)

    thread = threading.Thread(target=send)
    thread.start()
    wait_for(lambda: engine.num_in_flight > 0, "a beam step reached the engine")
    engine.abort_all()
    thread.join(60)
    response = result["response"]
    assert response.status_code == 200, response.text
    assert [c["finish_reason"] for c in response.json()["choices"]] == ["abort"] * 3
    wait_idle(server)
