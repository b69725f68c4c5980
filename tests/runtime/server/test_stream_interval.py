"""--stream-interval N (vLLM's flag): a stream sends its first token at once, then chunks of at least N
tokens, then the rest with the finish; every token exactly once, the same tokens as with interval 1."""

from __future__ import annotations

import json

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

BODY = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 30, "temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def every_four(server_llm):
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", stream_interval=4))
    yield live
    live.stop()


def token_chunks(url: str) -> list[list[int]]:
    body = {**BODY, "stream": True, "return_token_ids": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    return [c["choices"][0]["token_ids"] for c in chunks if c["choices"] and c["choices"][0].get("token_ids")]


def test_chunks_of_at_least_the_interval_and_every_token_once(every_four, server):
    chunks = token_chunks(every_four.url)
    assert len(chunks[0]) >= 1  # the first token did not wait for three more
    assert all(len(c) >= 4 for c in chunks[1:-1])
    assert len(chunks) <= 1 + -(-29 // 4)
    reference = token_chunks(server.url)  # interval 1 (the shared server)
    assert [t for c in chunks for t in c] == [t for c in reference for t in c] and len(reference) > len(chunks)


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="stream_interval"):
        ServerConfig(stream_interval=0)
