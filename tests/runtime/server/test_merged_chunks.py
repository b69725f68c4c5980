"""A stream whose reader falls behind the engine gets one chunk for what waited, several tokens in it.

The real server (uvicorn on 127.0.0.1) and real clients. The slow reader is made, on any machine, by
blocking the server's event loop while the held engine runs a given number of steps: their outputs
wait in the request's mailbox, and the loop then finds them all at once. Every test asserts on what
the client received (each token exactly once, in order; logprobs, finish, usage) and on the state the
server is left in, never on timing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from model_optimizer.optimizer.bench.load import RunPlan
from model_optimizer.optimizer.bench.metrics import itls, summarize
from tests.optimizer.bench.util import InBackground, make_requests
from tests.runtime.server.live import metric, wait_for

WAIT = 30.0  # seconds; only a bound on a hang
GREEDY = {"temperature": 0.0, "ignore_eos": True}


@contextmanager
def loop_blocked(server) -> Iterator[None]:
    """Block the server's event loop for the block (the engine thread keeps delivering behind it)."""
    entered, leave = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        leave.wait(WAIT)

    server.state.engine._loop.call_soon_threadsafe(block)
    assert entered.wait(WAIT)
    try:
        yield
    finally:
        leave.set()


def queue_steps(server, until) -> None:
    """With the gate held, block the loop and run engine steps until `until(engine)` holds."""
    engine = server.state.engine
    assert engine.gate.wait_parked(WAIT)
    with loop_blocked(server):
        assert engine.gate.run_until(lambda: until(engine), WAIT)


def events(lines: Iterator[str]) -> list[dict]:
    """The JSON chunks of an SSE body, checked to end with [DONE] and carry no error."""
    data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all("error" not in c for c in chunks), chunks
    return chunks


def slow_read(server, path: str, body: dict, num_tokens: int | None) -> list[dict]:
    """Stream `body`; the first `num_tokens` tokens (all of them when None) wait for the reader."""
    engine = server.state.engine
    start = engine.stats.num_generation_tokens
    with engine.gate.held():
        with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=WAIT) as r:
            assert r.status_code == 200  # the headers follow the add: the request is in the engine
            if num_tokens is None:
                queue_steps(server, lambda e: e.stats.num_running + e.stats.num_waiting == 0)  # the core is done
            else:
                queue_steps(server, lambda e: e.stats.num_generation_tokens >= start + num_tokens)
            lines = r.iter_lines()
            engine.gate.release()
            return events(lines)


def whole(server, path: str, body: dict) -> dict:
    body = {key: value for key, value in body.items() if key != "stream_options"}  # streams only
    r = httpx.post(server.url + path, json={**body, "stream": False}, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.json()


def token_choices(chunks: list[dict]) -> list[dict]:
    return [c for chunk in chunks for c in chunk["choices"] if c.get("token_ids")]


def test_completions_slow_reader_gets_several_tokens_per_chunk_each_once(server):
    body = {"prompt": "The sky is", "max_tokens": 12, "logprobs": 2, "return_token_ids": True, **GREEDY}
    body["stream_options"] = {"include_usage": True}
    [ref] = whole(server, "/v1/completions", body)["choices"]
    before = httpx.get(server.url + "/metrics", timeout=WAIT).text

    chunks = slow_read(server, "/v1/completions", body, 5)
    *token_chunks, usage_chunk = chunks
    choices = [c["choices"][0] for c in token_chunks]
    assert len(choices[0]["token_ids"]) >= 5  # what waited came as one chunk
    assert len(choices) < 12
    assert [t for c in choices for t in c["token_ids"]] == ref["token_ids"]  # every token once, in order
    assert "".join(c["text"] for c in choices) == ref["text"]
    for c in choices:  # logprobs: one entry per token of the chunk
        assert len(c["logprobs"]["tokens"]) == len(c["token_ids"]) == len(c["logprobs"]["top_logprobs"])
    for field in ("tokens", "text_offset"):  # offsets keep counting across merged chunks
        assert [x for c in choices for x in c["logprobs"][field]] == ref["logprobs"][field]
    streamed = [x for c in choices for x in c["logprobs"]["token_logprobs"]]
    assert streamed == pytest.approx(ref["logprobs"]["token_logprobs"], abs=1e-4)
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 12

    after = httpx.get(server.url + "/metrics", timeout=WAIT).text

    def change(name: str) -> float:
        return metric(after, name) - metric(before, name)

    # the server's metrics count tokens, not chunks: an inter-token latency for each token after the first
    assert change("vllm:request_generation_tokens_sum") == 12
    assert change("vllm:inter_token_latency_seconds_count") == 11
    assert change("vllm:time_to_first_token_seconds_count") == 1


def test_chat_slow_reader_with_the_openai_client(server):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "logprobs": True, "top_logprobs": 2}
    body |= {"return_token_ids": True, **GREEDY}
    [ref] = whole(server, "/v1/chat/completions", body)["choices"]
    merged_ids: list[int] = []
    engine = server.state.engine
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=WAIT)
    with engine.gate.held():
        stream = client.chat.completions.create(
            model="tiny",
            messages=body["messages"],
            max_tokens=10,
            logprobs=True,
            top_logprobs=2,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "return_token_ids": True},
        )
        queue_steps(
            server, lambda e: e.stats.num_running + e.stats.num_waiting == 0
        )  # the whole answer waits for the reader
        engine.gate.release()
        chunks = list(stream)
    token_chunks = [c for c in chunks if c.choices and c.choices[0].model_extra.get("token_ids")]
    assert len(token_chunks) == 1  # all of it in one chunk
    [choice] = token_chunks[0].choices
    merged_ids = choice.model_extra["token_ids"]
    assert merged_ids == ref["token_ids"] and choice.delta.content == ref["message"]["content"]
    assert [lp.token for lp in choice.logprobs.content] == [lp["token"] for lp in ref["logprobs"]["content"]]
    assert all(len(lp.top_logprobs) == 2 for lp in choice.logprobs.content)
    assert choice.finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 10 and chunks[-1].choices == []


def test_stop_string_still_cuts_a_merged_chunk(server):
    base = {"prompt": "Once upon a time", "max_tokens": 24, **GREEDY}
    text = whole(server, "/v1/completions", base)["choices"][0]["text"]
    at = next(i for i in range(4, len(text) - 3) if text[i : i + 3].strip() and text.find(text[i : i + 3]) == i)
    stop = text[at : at + 3]
    body = {**base, "stop": [stop], "return_token_ids": True}
    [ref] = whole(server, "/v1/completions", body)["choices"]
    assert ref["text"] == text[:at] and ref["finish_reason"] == "stop"

    chunks = slow_read(server, "/v1/completions", body, None)  # the stop is hit while the reader is behind
    choices = [c["choices"][0] for c in chunks]
    assert "".join(c["text"] for c in choices) == text[:at]  # cut before the stop string, as unmerged
    assert [t for c in choices for t in c["token_ids"]] == ref["token_ids"]
    assert choices[-1]["finish_reason"] == "stop" and choices[-1]["stop_reason"] == stop


def test_n2_and_two_prompts_each_choice_gets_its_tokens_once(server):
    prompts = ["The sky is", "Once upon a time"]
    refs = [whole(server, "/v1/completions", {"prompt": p, "max_tokens": 8, **GREEDY}) for p in prompts]
    body = {"prompt": prompts, "n": 2, "max_tokens": 8, "logprobs": 1, "return_token_ids": True, **GREEDY}
    body["stream_options"] = {"include_usage": True}
    chunks = slow_read(server, "/v1/completions", body, 4)
    per_choice: dict[int, list[dict]] = {}
    for c in token_choices(chunks) + [c for chunk in chunks for c in chunk["choices"] if not c.get("token_ids")]:
        per_choice.setdefault(c["index"], []).append(c)
    assert sorted(per_choice) == [0, 1, 2, 3]  # prompt i's j-th completion is choice 2 * i + j
    assert max(len(c["token_ids"]) for c in token_choices(chunks)) > 1  # some chunk carried several tokens
    for index, choices in per_choice.items():
        ref = refs[index // 2]["choices"][0]
        assert "".join(c["text"] for c in choices) == ref["text"]  # greedy: both completions alike
        assert [t for c in choices for t in c.get("token_ids", [])] == [
            t for c in token_choices(chunks) if c["index"] == index for t in c["token_ids"]
        ]
        assert sum(len(c["token_ids"]) for c in choices) == 8
        for c in choices:
            if c["logprobs"] is not None:
                assert len(c["logprobs"]["tokens"]) == len(c["token_ids"])
        assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == 4 * 8


def test_client_gone_with_merged_outputs_pending_frees_the_request(server):
    engine = server.state.engine
    text = httpx.get(server.url + "/metrics", timeout=WAIT).text
    aborted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line
    )
    body = {"prompt": "a long story", "max_tokens": 64, "stream": True, **GREEDY}
    with engine.gate.held() as gate:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=WAIT) as r:
            assert r.status_code == 200
            start = engine.stats.num_generation_tokens
            with loop_blocked(server):
                assert gate.wait_parked(WAIT)
                assert gate.run_until(lambda: engine.stats.num_generation_tokens >= start + 3, WAIT)
                assert server.state.num_admitted == 1
        # the client left while three steps' outputs waited unread, and the engine is still held
        wait_for(lambda: server.state.num_admitted == 0, "the server saw the client leave")
        assert gate.wait_parked(WAIT)  # its abort is applied
        assert engine.num_in_flight == 0 and engine.stats.num_running == 0
        assert engine.stats.num_free_blocks == engine.stats.num_blocks
    text = httpx.get(server.url + "/metrics", timeout=WAIT).text
    after = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line
    )
    assert after == aborted + 1


@pytest.mark.parametrize("return_token_ids", [True, False])
def test_bench_counts_the_tokens_of_merged_chunks(server, return_token_ids):
    """`mopt bench`'s client against a slow reader: tokens per chunk from token_ids (or, without them,
    the usage spread by text), so every token is counted once and timed once in ITL."""
    engine = server.state.engine
    with engine.gate.held():
        run = InBackground(
            server.url,
            RunPlan("closed", concurrency=1, num_requests=1),
            make_requests(1, output_len=12),
            return_token_ids=return_token_ids,
        )
        wait_for(lambda: engine.num_in_flight == 1, "the bench request reached the engine")
        start = engine.stats.num_generation_tokens
        queue_steps(server, lambda e: e.stats.num_generation_tokens >= start + 6)
        engine.gate.release()
        [rec] = run.join(WAIT)
    assert rec.ok, rec.error_detail
    assert rec.output_tokens == 12 and sum(rec.chunk_tokens) == 12
    assert len(rec.chunk_tokens) == len(rec.chunk_times) < 12  # fewer chunks than tokens
    if return_token_ids:
        assert rec.chunk_tokens[0] >= 6  # what waited came as one chunk, counted by its ids
    gaps = itls(rec)
    assert len(gaps) == 12 - rec.chunk_tokens[0] and all(g >= 0 for g in gaps)
    assert summarize([rec])["itl_ms"]["count"] == len(gaps)
