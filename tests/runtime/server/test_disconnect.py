"""Clients that hang up: their requests are aborted and their KV blocks freed, under load too."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time

import httpx
import pytest

from tests.runtime.server.conftest import API_KEY
from tests.runtime.server.live import metric, wait_for

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def scrape(url: str) -> str:
    return httpx.get(url + "/metrics", timeout=30).text


def wait_idle(server, timeout: float = 120.0) -> str:
    """Wait until every block is free and nothing runs or waits; return the last scrape. The timeout only
    bounds a hang: a dropped request may instead run to its end, which a loaded machine makes slow."""
    deadline = time.monotonic() + timeout
    while True:
        text = scrape(server.url)
        idle = (
            metric(text, "mopt:kv_cache_free_blocks") == metric(text, "mopt:kv_cache_total_blocks")
            and metric(text, "vllm:num_requests_running") == 0
            and metric(text, "vllm:num_requests_waiting") == 0
            and server.state.num_admitted == 0
        )
        if idle or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def aborted_count(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def finished_count(text: str, reason: str) -> float:
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and f'finished_reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


LONG = 400  # tokens: far more than a test ever lets the engine run
WAIT = 30.0  # seconds; only a bound on a hang


@pytest.mark.parametrize("n", [1, 3])
def test_streaming_client_dropped_after_first_token_frees_blocks(strict_server, n):
    """The engine is held, so the request is provably mid-generation when the client leaves."""
    server, engine = strict_server, strict_server.state.engine
    # logprobs: every token makes a chunk, even one whose text is still empty (a partial character)
    body = {"prompt": "a long story", "max_tokens": LONG, "ignore_eos": True, "stream": True, "n": n, "logprobs": 1}
    before = wait_idle(server)
    with engine.gate.held() as gate:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=WAIT) as r:
            assert r.status_code == 200  # the headers follow the add: the request is in the engine
            assert gate.wait_parked(WAIT)
            start = engine.stats.num_generation_tokens
            assert gate.run_until(lambda: engine.stats.num_generation_tokens > start, WAIT)
            lines = r.iter_lines()  # kept referenced: a dropped iterator closes the response (a disconnect)
            for line in lines:
                if line.startswith("data: ") and json.loads(line[6:])["choices"]:
                    break
            assert server.state.num_admitted == 1
            assert engine.stats.num_free_blocks < engine.stats.num_blocks
            at_drop = engine.stats.num_generation_tokens
        wait_for(lambda: server.state.num_admitted == 0, "the server saw the client leave")
        assert gate.wait_parked(WAIT)  # its abort is applied, with the engine still held
        stats = engine.stats
        assert stats.num_free_blocks == stats.num_blocks and stats.num_running == stats.num_waiting == 0
        assert stats.num_generation_tokens == at_drop
    after = wait_idle(server)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert aborted_count(after) == aborted_count(before) + n
    assert finished_count(after, "length") == finished_count(before, "length")
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert generated == at_drop - start  # nothing more after the release: it stayed aborted


def test_chat_stream_dropped_after_role_chunk(server):
    """The main server's chat: dropped as soon as the role chunk arrives, before any token."""
    before = wait_idle(server)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as r:
        next(line for line in r.iter_lines() if line.startswith("data: "))
    after = wait_idle(server)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert generated <= 64


def test_non_streaming_client_dropped_frees_blocks(strict_server):
    """A raw socket that hangs up after the first token was generated, with the engine held."""
    server, engine = strict_server, strict_server.state.engine
    before = wait_idle(server)
    payload = json.dumps({"prompt": "wait for me", "max_tokens": LONG, "ignore_eos": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with engine.gate.held() as gate:
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            sock.sendall(head + payload)
            wait_for(lambda: engine.stats.num_waiting == 1, "the request is in the engine")
            start = engine.stats.num_generation_tokens
            assert gate.run_until(lambda: engine.stats.num_generation_tokens > start, WAIT)
            assert server.state.num_admitted == 1 and engine.stats.num_running == 1
            at_drop = engine.stats.num_generation_tokens
        wait_for(lambda: server.state.num_admitted == 0, "the server saw the client leave")
        assert gate.wait_parked(WAIT)
        stats = engine.stats
        assert stats.num_free_blocks == stats.num_blocks and stats.num_running == stats.num_waiting == 0
        assert stats.num_generation_tokens == at_drop
    after = wait_idle(server)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert generated == at_drop - start >= 1
    assert aborted_count(after) == aborted_count(before) + 1


def test_clients_dropped_before_first_token(server):
    wait_idle(server)
    for timeout in (0.001, 0.005, 0.02):
        for stream in (False, True):
            try:
                with httpx.stream(
                    "POST",
                    server.url + "/v1/completions",
                    timeout=timeout,
                    json={"prompt": "word " * 100, "max_tokens": 20, "stream": stream},
                ) as r:
                    r.read()
            except httpx.TimeoutException:
                pass
    after = wait_idle(server)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert server.state.num_admitted == 0


async def _one_client(client: httpx.AsyncClient, i: int, drop: str | None, started) -> dict:
    body = {
        "prompt": f"request number {i}",
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.7,
        "seed": i,
    }
    text, finish, done, chunks = "", None, False, 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        started()
        if drop == "before":
            return {"dropped": True}
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            event = json.loads(line[6:])
            chunks += 1
            for choice in event["choices"]:
                text += choice["text"]
                finish = choice["finish_reason"] or finish
            if drop == "after" and chunks == 1:
                return {"dropped": True}
    return {"dropped": False, "done": done, "finish": finish, "text": text}


@pytest.mark.slow
def test_200_concurrent_streams_with_30_percent_disconnects(server):
    """All 200 are added while the engine is held (so they are provably concurrent); those dropped
    before their first token are gone before it runs; then it runs free."""
    before = wait_idle(server)
    engine = server.state.engine
    rng = random.Random(0)
    plan = [rng.choice(["before", "after"]) if rng.random() < 0.3 else None for _ in range(200)]
    stay = 200 - plan.count("before")
    seen = {"admitted": 0, "in_engine": 0}

    async def main() -> list:
        all_started = asyncio.Event()
        num_started = 0

        def started() -> None:
            nonlocal num_started
            num_started += 1
            if num_started == len(plan):
                all_started.set()

        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
            tasks = [asyncio.ensure_future(_one_client(client, i, d, started)) for i, d in enumerate(plan)]
            try:
                await asyncio.wait_for(all_started.wait(), 120)
                while server.state.num_admitted != stay:  # the early leavers are aborted, the rest wait
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(engine.gate.wait_parked, WAIT)
                seen["admitted"], seen["in_engine"] = server.state.num_admitted, engine.stats.num_waiting
            finally:
                engine.gate.release()
            return await asyncio.gather(*tasks)

    engine.gate.hold()
    try:
        results = asyncio.run(asyncio.wait_for(main(), 300))
    finally:
        engine.gate.release()
    assert seen == {"admitted": stay, "in_engine": stay}  # held: nobody had a token, nobody finished
    kept = [r for r in results if not r["dropped"]]
    assert len(kept) == plan.count(None)
    assert all(r["done"] and r["finish"] == "length" for r in kept)
    after = wait_idle(server)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert server.state.num_admitted == 0
    aborted = aborted_count(after) - aborted_count(before)
    length = finished_count(after, "length") - finished_count(before, "length")
    # every request is accounted for once: the early leavers aborted; those that left after their first
    # token aborted, or finished if their 4 tokens were out before the server noticed
    assert aborted + length == 200 and aborted >= plan.count("before") and length >= len(kept)
    print(
        f"\n200 streams, {200 - len(kept)} dropped ({plan.count('before')} before, {plan.count('after')} after "
        f"the first token): {len(kept)} completed, {length:.0f} ran to the end, {aborted:.0f} aborted; "
        f"free blocks back to {metric(after, 'mopt:kv_cache_free_blocks'):.0f}/"
        f"{metric(after, 'mopt:kv_cache_total_blocks'):.0f}; {stay} held in the engine at once"
    )
