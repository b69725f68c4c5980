"""Stop strings end to end, through the openai client: streamed deltas join into the text a request without
streaming gets, for completions and chat, in the shapes the detokenizer fuzz found wrong
(tests/runtime/engine/test_detokenize_fuzz.py). `allowed_token_ids` with one id makes the tiny random
model write exactly the tokens a shape needs."""

from __future__ import annotations

import openai
import pytest


def generate(server, api: str, token_id: int, stream: bool, **fields) -> tuple[str, str, str | int | None]:
    """(text, finish_reason, stop_reason) of one choice that may only write `token_id`; a stream's deltas joined."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    extra = {"allowed_token_ids": [token_id], **fields.pop("extra", {})}
    common = dict(model="tiny", temperature=0, stream=stream, extra_body=extra, **fields)
    if api == "chat":
        reply = client.chat.completions.create(messages=[{"role": "user", "content": "hello"}], **common)
    else:
        reply = client.completions.create(prompt="hello", **common)
    if not stream:
        choice = reply.choices[0]
        text = choice.message.content if api == "chat" else choice.text
        return text or "", choice.finish_reason, getattr(choice, "stop_reason", None)
    text, finish, stop_reason = "", None, None
    for chunk in reply:
        for choice in chunk.choices:
            text += (choice.delta.content or "") if api == "chat" else choice.text
            finish = choice.finish_reason or finish
            stop_reason = getattr(choice, "stop_reason", None) or stop_reason
    return text, finish, stop_reason


@pytest.fixture(scope="module")
def tokenizer(server_llm):
    return server_llm.tokenizer


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_min_tokens_text_never_stops_later(server, tokenizer, api):
    """'b' inside the first (min_tokens) token's 'ab' is exempt; the next token's 'b' stops it, as in vLLM."""
    [ab] = tokenizer.encode("ab")
    fields = dict(max_tokens=4, stop=["b", "xxxxx"], extra={"min_tokens": 1})
    whole = generate(server, api, ab, stream=False, **fields)
    assert whole == ("aba", "stop", "b")
    assert generate(server, api, ab, stream=True, **fields) == whole


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("include", [False, True])
def test_stop_string_in_text_held_to_the_end_is_cut(server, tokenizer, api, include):
    """' \\xe2\\x80' (a space and two bytes of '“') again and again: the text always ends in an incomplete
    character, so it is all held until the end, where the stop string ' ' in it ends the completion."""
    token = tokenizer.encode(" “")[0]
    assert tokenizer.decode([token]) == " \ufffd"
    fields = dict(max_tokens=3, stop=[" "], extra={"include_stop_str_in_output": include})
    whole = generate(server, api, token, stream=False, **fields)
    assert whole == (" " if include else "", "stop", " ")
    assert generate(server, api, token, stream=True, **fields) == whole
