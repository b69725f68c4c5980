"""Many clients of every shape leaving `mopt serve` at once, across the process boundary: streams after a few
chunks, plain requests while queued, raw connections mid-body. Every request they leave is aborted in the
engine core and its blocks freed, those that stay get whole answers, and the server logs no traceback or
unretrieved task exception, then drains and exits 0.

The engine is paused until every request is provably queued; the test then waits for states (queued, idle),
each wait bounded only against a hang."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from tests.runtime.server.live import metric
from tests.runtime.server.test_process import launch, paused, wait_for

WAIT = 120.0
STREAMS = [  # (path, body, sequences it puts in the engine)
    ("/v1/completions", {"prompt": "one", "stream": True}, 1),
    ("/v1/completions", {"prompt": "three", "n": 3, "stream": True}, 3),
    ("/v1/completions", {"prompt": ["a", "b", "c"], "stream": True}, 3),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, 1),
]
PLAIN = [
    ("/v1/completions", {"prompt": "plain"}, 1),
    ("/v1/completions", {"prompt": ["x", "y"]}, 2),
    ("/v1/completions", {"prompt": "beam", "use_beam_search": True, "n": 2}, 1),  # one request at its first step
]
LONG = {"max_tokens": 300, "ignore_eos": True}
SHORT = {"max_tokens": 20, "ignore_eos": True}


def idle(url: str) -> bool:
    text = httpx.get(url + "/metrics", timeout=30).text
    return (
        metric(text, "vllm:num_requests_running") == 0
        and metric(text, "vllm:num_requests_waiting") == 0
        and metric(text, "mopt:kv_cache_free_blocks") == metric(text, "mopt:kv_cache_total_blocks")
    )


def num_waiting(url: str) -> float:
    return metric(httpx.get(url + "/metrics", timeout=30).text, "vllm:num_requests_waiting")


async def stream(client: httpx.AsyncClient, path: str, body: dict, leave_after: int | None) -> dict:
    """Read `leave_after` events, then hang up (None: read to the end)."""
    events = []
    async with client.stream("POST", path, json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if leave_after is not None and len(events) >= leave_after:
                    return {"left": True}
    return {"left": False, "events": events}


async def raw_hang_up(port: int, path: str, body: dict, cut: str) -> None:
    """Send a request's head and part of its body (or the head alone), then close the connection."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head if cut == "head" else head + data[: len(data) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def storm(url: str, rng: random.Random) -> tuple[list[dict], list[httpx.Response]]:
    port = int(url.rsplit(":", 1)[1])
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=WAIT, limits=limits) as client:
        # leaving after 2 events or more: chat's first is its role chunk, sent before the engine runs
        plans = [(p, b, n, rng.choice([None, 2, 3, 4])) for p, b, n in STREAMS * 6]
        streams = [
            asyncio.ensure_future(stream(client, p, {**b, **(SHORT if k is None else LONG)}, k)) for p, b, _, k in plans
        ]
        staying = [asyncio.ensure_future(client.post(p, json={**b, **SHORT})) for p, b, _ in PLAIN * 2]
        leaving = [asyncio.ensure_future(client.post(p, json={**b, **LONG})) for p, b, _ in PLAIN * 4]
        await asyncio.gather(*(raw_hang_up(port, p, b, rng.choice(["head", "body"])) for p, b, _ in PLAIN * 4))
        queued = sum(n for *_, n, _ in plans) + sum(n for *_, n in PLAIN * 6)
        await asyncio.to_thread(wait_for, lambda: num_waiting(url) == queued, WAIT)
        for task in leaving:  # their clients hang up while the engine still holds them, queued
            task.cancel()
        await asyncio.gather(*leaving, return_exceptions=True)
        await asyncio.to_thread(paused, url, {}, False)
        return await asyncio.gather(*streams), await asyncio.gather(*staying)


@pytest.mark.slow
def test_a_storm_of_clients_leaving_leaves_the_engine_empty_and_the_log_clean(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--enable-pause", "--max-num-seqs", "16", env={"MOPT_API_KEY": None})
    try:
        paused(url, {}, True)
        streamed, plain = asyncio.run(storm(url, random.Random(0)))
        wait_for(lambda: idle(url), WAIT)
        for out in streamed:
            if not out["left"]:
                assert out["events"][-1] == "[DONE]"
                choices = [c for e in out["events"][:-1] for c in json.loads(e)["choices"]]
                assert {c["finish_reason"] for c in choices if c["finish_reason"]} == {"length"}
        for response in plain:
            assert response.status_code == 200, response.text
            assert {c["finish_reason"] for c in response.json()["choices"]} == {"length"}
        proc.terminate()
        assert proc.wait(WAIT) == 0
        output = proc.stdout.read()
        for sign in ("Traceback", "never retrieved", "ERROR"):
            assert sign not in output, output
    finally:
        proc.kill()
