"""Request bodies are read strictly: wrong JSON types, broken JSON and fields we do not support are 400s
naming the field, never coerced or ignored."""

from __future__ import annotations

import pytest

from tests.runtime.server.test_errors import assert_error


@pytest.mark.parametrize(
    "path, field, value",
    [
        ("/v1/completions", "max_tokens", True),
        ("/v1/completions", "max_tokens", "5"),
        ("/v1/completions", "max_tokens", 5.5),  # a whole 5.0 is 5, as vLLM reads it (test_vllm_request_bounds.py)
        ("/v1/completions", "n", True),
        ("/v1/completions", "stream", "yes"),
        ("/v1/completions", "echo", 1),
        ("/v1/completions", "temperature", "0.5"),
        ("/v1/completions", "seed", "1"),
        ("/v1/completions", "ignore_eos", "true"),
        ("/v1/completions", "stop", 5),
        ("/v1/completions", "prompt", [True, False]),
        ("/v1/completions", "stream_options", {"include_usage": "yes"}),
        ("/v1/chat/completions", "logprobs", "true"),
        ("/v1/chat/completions", "max_completion_tokens", "4"),
        ("/v1/chat/completions", "messages", [{"role": "user", "content": 5}]),
    ],
)
def test_strict_types(client, path, field, value):
    body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    error = assert_error(client.post(path, json={"max_tokens": 2, **body, field: value}), 400, field)
    assert error["param"] == field


def test_json_decode_error_has_a_message_not_an_offset(client):
    r = client.post("/v1/completions", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    error = assert_error(r, 400, "JSON")
    assert error["param"] is None


def test_max_completion_tokens_error_names_that_field(client):
    error = assert_error(
        client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 500}
        ),
        400,
        "max_completion_tokens",
    )
    assert error["param"] == "max_completion_tokens"


@pytest.mark.parametrize(
    "field, value, reason",
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}], "--enable-auto-tool-choice"),
        ("tool_choice", "required", "needs tools"),
        ("functions", [{"name": "f"}], "not supported: use tools"),
        ("response_format", {"type": "structural_tag"}, "structural_tag.triggers must be"),
    ],
)
def test_chat_fields_this_server_cannot_honour_are_refused(client, field, value, reason):
    """Tools with the default tool_choice "auto" need --enable-auto-tool-choice (the shared server has it
    off); the rest of structured outputs and tools is tested in test_structured_outputs.py."""
    r = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, field: value}
    )
    error = assert_error(r, 400, reason)
    assert error["param"] == ("tool_choice" if field == "tools" else field)


def test_plain_response_format_and_no_tools_are_fine(client):
    r = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            "response_format": {"type": "text"},
            "tools": [],
            "tool_choice": "none",
        },
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("response_format", {"type": "text"}, lambda text: True),
        ("guided_regex", "[a-c]{2}", lambda text: text in {a + b for a in "abc" for b in "abc"}),
        ("guided_choice", ["yes", "no"], lambda text: text in ("yes", "no")),
        ("guided_grammar", 'root ::= "a" | "b"', lambda text: text in ("a", "b")),
        ("structured_outputs", {"choice": ["yes", "no"]}, lambda text: text in ("yes", "no")),
        ("guided_json", {"enum": [1, 2]}, lambda text: text in ("1", "2")),
    ],
)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_structured_output_fields_constrain_the_output(client, path, field, value, valid):
    body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    r = client.post(path, json={**body, "max_tokens": 8, field: value})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert valid(choice.get("text", choice.get("message", {}).get("content"))), choice
