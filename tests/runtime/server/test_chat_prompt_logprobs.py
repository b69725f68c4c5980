"""vLLM's prompt_logprobs on /v1/chat/completions, on a real server: the rendered chat prompt's logprobs on
the response, beside the choices (what /v1/completions gives for the same token ids); streamed, only 0 is
taken, as vLLM refuses more with stream true."""

from __future__ import annotations

import json

import openai
import pytest

from tests.runtime.server.test_errors import assert_error
from tests.runtime.server.test_vllm_request_bounds import ok

MESSAGES = [{"role": "user", "content": "Score this prompt, please"}]
CHAT = {"model": "tiny", "messages": MESSAGES, "max_tokens": 3, "temperature": 0}


def test_chat_prompt_logprobs_are_those_of_the_rendered_prompt(client):
    body = ok(client.post("/v1/chat/completions", json={**CHAT, "prompt_logprobs": 2}))
    prompt = ok(client.post("/tokenize", json={"model": "tiny", "messages": MESSAGES}))["tokens"]
    got = body["prompt_logprobs"]
    assert len(got) == len(prompt) == body["usage"]["prompt_tokens"] and got[0] is None
    scored = ok(
        client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 2})
    )
    expected = scored["choices"][0]["prompt_logprobs"]
    for mine, theirs, token_id in zip(got[1:], expected[1:], prompt[1:]):
        assert set(mine) == set(theirs) and str(token_id) in mine and 1 <= len(mine) <= 3
        for key, entry in mine.items():
            assert entry["logprob"] == pytest.approx(theirs[key]["logprob"], abs=1e-4)
            assert entry["rank"] == theirs[key]["rank"] and entry["decoded_token"] == theirs[key]["decoded_token"]
    plain = ok(client.post("/v1/chat/completions", json=CHAT))
    assert "prompt_logprobs" not in plain  # only when asked
    assert plain["choices"][0]["message"] == body["choices"][0]["message"]


def test_one_list_for_n_choices_and_zero_lists_the_prompt_token_alone(client):
    body = ok(client.post("/v1/chat/completions", json={**CHAT, "n": 2, "temperature": 1.0, "prompt_logprobs": 0}))
    assert len(body["choices"]) == 2
    assert body["prompt_logprobs"][0] is None and all(len(entry) == 1 for entry in body["prompt_logprobs"][1:])


def test_the_openai_client_reads_them(server):
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    out = api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, extra_body={"prompt_logprobs": 1})
    assert out.model_extra["prompt_logprobs"][0] is None and len(out.model_extra["prompt_logprobs"]) > 1


def test_streamed_prompt_logprobs_above_0_are_refused_and_0_is_taken(client):
    error = assert_error(
        client.post("/v1/chat/completions", json={**CHAT, "stream": True, "prompt_logprobs": 1}), 400, "stream"
    )
    assert error["param"] == "prompt_logprobs"
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True, "prompt_logprobs": 0}) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks and all("prompt_logprobs" not in chunk for chunk in chunks)
