"""A tokenizer that misbehaves: a decode that breaks mid-stream ends the stream with an error, then [DONE];
transformers' long-prompt warning stays out of the log."""

from __future__ import annotations

import json

import httpx

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import sse_payloads, start_server


class FailingDecode:
    """A real tokenizer whose single-token decode breaks (as a broken tokenizer would) after setup."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def decode(self, token_ids, **kwargs):
        if len(token_ids) == 1:
            raise RuntimeError("decode broke")
        return self.tokenizer.decode(token_ids, **kwargs)


def test_stream_that_fails_midway_ends_with_error_then_done(own_llm, swapped_tokenizer):
    swapped_tokenizer(FailingDecode)
    live = start_server(own_llm, ServerConfig())
    try:
        r = httpx.post(
            live.url + "/v1/completions",
            timeout=60,
            json={"prompt": [5, 6], "max_tokens": 3, "logprobs": 1, "stream": True, "ignore_eos": True},
        )
        events = sse_payloads(r)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == 500 and "RuntimeError" in error["message"]
    finally:
        live.stop()


def test_long_prompt_warning_of_transformers_is_silenced(own_llm, caplog):
    import transformers

    transformers.logging.set_verbosity_warning()  # as a fresh process starts
    tokenizer = own_llm.tokenizer
    saved = tokenizer.model_max_length
    tokenizer.model_max_length = 8
    getattr(tokenizer, "deprecation_warnings", {}).clear()  # transformers warns once per tokenizer
    live = start_server(own_llm, ServerConfig())
    try:
        r = httpx.post(live.url + "/v1/completions", json={"prompt": "hello world " * 20, "max_tokens": 1}, timeout=60)
        assert r.status_code in (200, 400), r.text
    finally:
        live.stop()
        tokenizer.model_max_length = saved
    assert not [rec for rec in caplog.records if "Token indices sequence length" in rec.getMessage()]


def test_a_responses_stream_that_fails_midway_ends_with_response_failed(own_llm, swapped_tokenizer):
    """The failure in the route's own work (the logprobs' token text): response.failed, numbered on from the
    last event sent, and no [DONE]."""
    swapped_tokenizer(FailingDecode)
    live = start_server(own_llm, ServerConfig())
    try:
        body = {"input": "hi", "max_output_tokens": 3, "top_logprobs": 1, "stream": True, "ignore_eos": True,
                "include": ["message.output_text.logprobs"]}  # fmt: skip
        r = httpx.post(live.url + "/v1/responses", timeout=60, json=body)
        events = [json.loads(p) for p in sse_payloads(r)]
    finally:
        live.stop()
    assert events[-1]["type"] == "response.failed" and "RuntimeError" in events[-1]["response"]["error"]["message"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
