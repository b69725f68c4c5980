"""A response's id is `cmpl-` / `chatcmpl-` plus the client's X-Request-Id, as vLLM names it; the engine's
own request ids stay unique, so two clients sending one id are both served."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.runtime.server.live import sse_payloads

BODY = {"max_tokens": 2, "temperature": 0}


def test_completion_and_chat_ids_carry_the_clients_request_id(server):
    headers = {"X-Request-Id": "trace-42"}
    completion = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", **BODY}, headers=headers, timeout=60)
    assert completion.json()["id"] == "cmpl-trace-42"
    chat = {"messages": [{"role": "user", "content": "hi"}], **BODY, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=chat, headers=headers, timeout=60) as r:
        r.read()
    ids = {json.loads(p)["id"] for p in sse_payloads(r) if p != "[DONE]"}
    assert ids == {"chatcmpl-trace-42"}


def test_without_the_header_or_with_a_bad_one_the_id_is_the_servers(server):
    plain = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", **BODY}, timeout=60).json()
    assert plain["id"].startswith("cmpl-") and len(plain["id"]) > len("cmpl-") + 16
    bad = {"X-Request-Id": "x" * 300}
    odd = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", **BODY}, headers=bad, timeout=60).json()
    assert odd["id"] != "cmpl-" + "x" * 300


def test_two_clients_with_one_request_id_are_both_served(server):
    headers = {"X-Request-Id": "same"}
    body = {"prompt": "hello there", "max_tokens": 8, "ignore_eos": True}

    def send(_: int) -> httpx.Response:
        return httpx.post(server.url + "/v1/completions", json=body, headers=headers, timeout=60)

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(send, range(4)))
    assert [r.status_code for r in responses] == [200] * 4
    assert {r.json()["id"] for r in responses} == {"cmpl-same"}
