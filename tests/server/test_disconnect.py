"""Clients that hang up: their requests are aborted and their KV blocks freed, under load too."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time

import httpx
import pytest

from tests.server.conftest import API_KEY
from tests.server.live import metric

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def scrape(url: str) -> str:
    return httpx.get(url + "/metrics", timeout=30).text


def wait_idle(server, timeout: float = 30.0) -> str:
    """Wait until every block is free and nothing runs or waits; return the last scrape."""
    deadline = time.monotonic() + timeout
    while True:
        text = scrape(server.url)
        idle = (metric(text, "mopt:kv_cache_free_blocks") == metric(text, "mopt:kv_cache_total_blocks")
                and metric(text, "vllm:num_requests_running") == 0 and metric(text, "vllm:num_requests_waiting") == 0
                and server.state.num_admitted == 0)
        if idle or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def aborted_count(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


LONG = 400  # tokens: long enough (about a second here) that the client is gone well before the end


@pytest.mark.parametrize("n", [1, 3])
def test_streaming_client_dropped_after_first_token_frees_blocks(strict_server, n):
    server, path = strict_server, "/v1/completions"
    body = {"prompt": "a long story", "max_tokens": LONG, "ignore_eos": True, "stream": True, "n": n}
    before = wait_idle(server)
    with httpx.stream("POST", server.url + path, json=body, headers=AUTH, timeout=30) as r:
        lines = r.iter_lines()  # kept referenced: a dropped iterator closes the response (a disconnect)
        for line in lines:
            if line.startswith("data: ") and json.loads(line[6:])["choices"]:
                break
        assert server.state.num_admitted == 1
        busy = scrape(server.url)
        assert metric(busy, "mopt:kv_cache_free_blocks") < metric(busy, "mopt:kv_cache_total_blocks")
    after = wait_idle(server, timeout=10)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert aborted_count(after) == aborted_count(before) + n
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert n <= generated < n * LONG / 2  # stopped early, not run to max_tokens


def test_chat_stream_dropped_after_role_chunk(server):
    """The main server's chat: dropped as soon as the role chunk arrives, before any token."""
    before = wait_idle(server)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=30) as r:
        next(line for line in r.iter_lines() if line.startswith("data: "))
    after = wait_idle(server, timeout=10)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert generated <= 64


def test_non_streaming_client_dropped_frees_blocks(strict_server):
    server = strict_server
    before = wait_idle(server)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={"prompt": "wait for me", "max_tokens": LONG, "ignore_eos": True},
                   headers=AUTH, timeout=httpx.Timeout(10, read=0.2))
    after = wait_idle(server, timeout=10)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert 1 <= generated < LONG / 2
    assert aborted_count(after) == aborted_count(before) + 1


def test_clients_dropped_before_first_token(server):
    wait_idle(server)
    for timeout in (0.001, 0.005, 0.02):
        for stream in (False, True):
            try:
                with httpx.stream("POST", server.url + "/v1/completions", timeout=timeout,
                                  json={"prompt": "word " * 100, "max_tokens": 20, "stream": stream}) as r:
                    r.read()
            except httpx.TimeoutException:
                pass
    after = wait_idle(server, timeout=10)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert server.state.num_admitted == 0


async def _one_client(client: httpx.AsyncClient, i: int, drop: str | None) -> dict:
    body = {"prompt": f"request number {i}", "max_tokens": 4, "ignore_eos": True, "stream": True,
            "temperature": 0.7, "seed": i}
    text, finish, done, chunks = "", None, False, 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
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


def test_200_concurrent_streams_with_30_percent_disconnects(server):
    before = wait_idle(server)
    rng = random.Random(0)
    plan = [rng.choice(["before", "after"]) if rng.random() < 0.3 else None for _ in range(200)]

    async def main() -> list:
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
            return await asyncio.gather(*(_one_client(client, i, d) for i, d in enumerate(plan)))

    peak = {"admitted": 0, "running": 0}
    sampling = True

    def sample() -> None:
        while sampling:
            peak["admitted"] = max(peak["admitted"], server.state.num_admitted)
            peak["running"] = max(peak["running"], server.state.engine.stats.num_running)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.monotonic()
    try:
        results = asyncio.run(main())
    finally:
        sampling = False
        sampler.join()
    elapsed = time.monotonic() - start
    assert peak["admitted"] >= 100  # really concurrent, not one after another
    kept = [r for r in results if not r["dropped"]]
    assert len(kept) == plan.count(None)
    assert all(r["done"] and r["finish"] == "length" for r in kept)
    after = wait_idle(server, timeout=30)
    assert metric(after, "mopt:kv_cache_free_blocks") == metric(after, "mopt:kv_cache_total_blocks")
    assert server.state.num_admitted == 0
    finished = metric(after, "vllm:e2e_request_latency_seconds_count") - metric(before, "vllm:e2e_request_latency_seconds_count")
    print(f"\n200 streams, {200 - len(kept)} dropped ({plan.count('before')} before, {plan.count('after')} after "
          f"the first token): {len(kept)} completed in {elapsed:.1f} s; {finished:.0f} ran to the end; "
          f"aborted {aborted_count(after) - aborted_count(before):.0f}; free blocks back to "
          f"{metric(after, 'mopt:kv_cache_free_blocks'):.0f}/{metric(after, 'mopt:kv_cache_total_blocks'):.0f}; "
          f"peak {peak['admitted']} admitted, {peak['running']} running in one batch")
