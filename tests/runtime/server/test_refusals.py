"""Requests that used to be answered wrongly or with a field silently ignored, on the real server: each is
now refused with the OpenAI error shape naming what was wrong, or answered as asked."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
COMPLETION = {"model": "tiny", "prompt": "hi", "max_tokens": 1}


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def error_of(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


@pytest.mark.parametrize("path, body", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)])
def test_prompt_logprobs_over_the_cap_is_refused_naming_field_and_cap(client, path, body):
    for asked, said in ((21, "21"), (-1, "the whole vocabulary (-1)")):
        error = error_of(client.post(path, json={**body, "prompt_logprobs": asked}))
        assert error["param"] == "prompt_logprobs"
        assert error["message"] == f"prompt_logprobs is {said}; this server allows at most 20"
    response = client.post(path, json={**body, "prompt_logprobs": 1})
    assert response.status_code == 200, response.text  # within the cap: answered with them
    if path == "/v1/completions":  # on each choice (tests/runtime/server/test_prompt_logprobs.py)
        assert response.json()["choices"][0]["prompt_logprobs"][0] is None
    else:  # beside the choices, as vLLM's chat (tests/runtime/server/test_chat_prompt_logprobs.py)
        assert response.json()["prompt_logprobs"][0] is None


@pytest.mark.parametrize(
    "path, raw",
    [
        ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "max_tokens": 1, "stop": ["\\ud800"]}'),
        ("/v1/completions", b'{"model": "tiny", "prompt": "hi", "max_tokens": 1, "stop": "a\\udc00"}'),
        (
            "/v1/chat/completions",
            b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
            b'"chat_template_kwargs": {"x": "\\ud800"}}',
        ),
        (
            "/tokenize",
            b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"\\ud83d": 1}}',
        ),
    ],
)
def test_lone_surrogates_are_refused_in_any_field(client, path, raw):
    error = error_of(client.post(path, content=raw, headers={"Content-Type": "application/json"}))
    assert "surrogate" in error["message"] and error["type"] == "invalid_request_error"
    # a surrogate pair is text, in the same fields
    pair = b'{"model": "tiny", "prompt": "hi \\ud83d\\ude00", "max_tokens": 1, "stop": ["\\ud83d\\ude00"]}'
    assert client.post("/v1/completions", content=pair, headers={"Content-Type": "application/json"}).status_code == 200


def test_tokenize_counts_a_text_longer_than_the_context(client, server):
    """/tokenize is for finding out how long a text is: the generation check (prompt must fit
    max_model_len) does not apply to it."""
    text = "hello world " * 5_000  # 60,000 characters; max_model_len is 128
    r = client.post("/tokenize", json={"model": "tiny", "prompt": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == len(body["tokens"]) > body["max_model_len"] == 128
    r = client.post("/tokenize", json={"model": "tiny", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200 and r.json()["count"] > 128, r.text
    # generation still refuses it
    assert "max_model_len" in error_of(client.post("/v1/completions", json={**COMPLETION, "prompt": text}))["message"]


# ----------------------------------------------------------------- CORS
def _cors_server(own_llm):
    config = ServerConfig(served_model_name="tiny", allowed_origins=["https://app.example"], allowed_methods=["POST"])
    return start_server(own_llm, config)


def _preflight(url: str, origin: str, method: str = "POST") -> httpx.Response:
    headers = {"Origin": origin, "Access-Control-Request-Method": method}
    return httpx.options(url + "/v1/completions", headers=headers, timeout=30)


@pytest.fixture(scope="module")
def own_llm(tiny_model):
    from model_optimizer import LLM
    from tests.runtime.server.conftest import ENGINE_ARGS

    return LLM(str(tiny_model("qwen3")), **ENGINE_ARGS)


def test_disallowed_preflight_is_answered_as_json(own_llm):
    live = _cors_server(own_llm)
    try:
        assert _preflight(live.url, "https://app.example").status_code == 200
        error = error_of(_preflight(live.url, "https://evil.example"))
        assert error["message"] == "CORS preflight refused: origin 'https://evil.example' not allowed by this server"
        error = error_of(_preflight(live.url, "https://evil.example", "DELETE"))
        assert "origin 'https://evil.example', method 'DELETE'" in error["message"] and error["code"] == 400
    finally:
        live.stop()


@pytest.mark.parametrize(
    "extra, param, fragment",
    [
        ({"top_logprobs": 3}, "top_logprobs", "needs logprobs: true"),
        ({"messages": [{"role": "user"}]}, "messages", "a user message needs content"),
        ({"messages": [{"role": "system", "content": None}, {"role": "user", "content": "hi"}]}, "messages", "system"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
                "tool_choice": "required",
            },
            "tools",
            "parameters must be a JSON Schema of type object",
        ),
    ],
    ids=["top-logprobs-alone", "user-without-content", "system-null-content", "string-parameters"],
)
def test_chat_requests_openai_refuses_are_refused(client, extra, param, fragment):
    """Each was answered 200 (top_logprobs dropped; "None" rendered as a message; a required call with empty
    arguments that ran to the length limit)."""
    error = error_of(client.post("/v1/chat/completions", json={**CHAT, **extra}))
    assert error["param"] == param and fragment in error["message"], error
    assistant_call = {"role": "assistant", "content": None, "tool_calls": []}  # an assistant may leave it out
    ok = client.post("/v1/chat/completions", json={**CHAT, "messages": [*CHAT["messages"], assistant_call]})
    assert ok.status_code == 200, ok.text


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(client, server):
    """vLLM's field on completions and chat: the prompt's last k tokens (-1: all that leave room for one output
    token), where it was ignored; a prompt too long for the context is cut instead of refused."""
    ids = list(range(5, 15))
    r = client.post("/v1/completions", json={**COMPLETION, "prompt": ids, "truncate_prompt_tokens": 3, "echo": True,
                                             "max_tokens": 0, "logprobs": 0})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 3
    assert len(r.json()["choices"][0]["logprobs"]["tokens"]) == 3  # the echoed prompt is the kept tokens
    text = "word " * 400  # past the 128-token context: refused without truncation, cut with -1
    assert client.post("/v1/completions", json={**COMPLETION, "prompt": text}).status_code == 400
    r = client.post("/v1/completions", json={**COMPLETION, "prompt": text, "truncate_prompt_tokens": -1})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == server.state.model.max_model_len - 1
    chat = {**CHAT, "messages": [{"role": "user", "content": text}], "truncate_prompt_tokens": 20}
    r = client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 20
    for bad in (0, server.state.model.max_model_len + 1):  # max_model_len itself is taken, as vLLM's
        error = error_of(client.post("/v1/completions", json={**COMPLETION, "truncate_prompt_tokens": bad}))
        assert error["param"] == "truncate_prompt_tokens"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_a_request_chat_template_and_rendered_kwargs_are_refused_by_name(client, path):
    """A template sent with the request used to be ignored without a word; kwargs that the server renders
    from the request itself (messages, tools, ...) used to fail inside jinja2's render."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    error = error_of(client.post(path, json={**body, "chat_template": "{{ 'x' }}"}))
    assert error["param"] == "chat_template" and "--chat-template" in error["message"]
    error = error_of(client.post(path, json={**body, "chat_template_kwargs": {"messages": [], "tools": None}}))
    assert error["param"] == "chat_template_kwargs"
    assert (
        error["message"] == "chat_template_kwargs may not set messages, tools: the server renders them from the request"
    )
    assert client.post(path, json={**body, "chat_template_kwargs": {"enable_thinking": False}}).status_code == 200


def test_a_content_part_that_is_not_text_or_lacks_its_text_says_so(client):
    image = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
    error = error_of(
        client.post("/v1/chat/completions", json={**CHAT, "messages": [{"role": "user", "content": [image]}]})
    )
    assert error["message"] == (
        "messages.0.content.0: only text content parts are supported (text, input_text, output_text, refusal), "
        "got 'image_url'"
    )
    assert error["param"] == "messages"
    error = error_of(
        client.post(
            "/v1/chat/completions", json={**CHAT, "messages": [{"role": "user", "content": [{"type": "input_text"}]}]}
        )
    )
    assert error["message"] == "messages.0.content.0: the 'input_text' part needs its text, a string under 'text'"


def test_a_body_nested_past_the_parser_is_named_so_not_called_invalid_json(client):
    deep = '{"a":' * 300 + "1" + "}" * 300
    raw = ('{"model": "tiny", "prompt": "hi", "max_tokens": 1, "x": ' + deep + "}").encode()
    error = error_of(client.post("/v1/completions", content=raw, headers={"Content-Type": "application/json"}))
    assert error["message"] == "the body nests arrays and objects deeper than the server reads"
