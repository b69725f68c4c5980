"""Speculative decoding through the real server: greedy completions (and their logprobs) identical to a
server without it, in-process and in an engine-core process of its own, and vLLM's spec_decode counters
on /metrics, consistent with each other; a client that hangs up mid-speculation leaves nothing behind; the
periodic stats line reports the mean acceptance length."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.stats_log import stats_line
from tests.runtime.server.conftest import CAPS, ENGINE_ARGS
from tests.runtime.server.live import metric, start_server, wait_for

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "adaptive": False}
PROMPTS = ["one two three one two three one two", "the cat sat on the mat. the cat", "zq"]
WAIT = 120


def completions(url: str) -> list[dict]:
    results = []
    for prompt in PROMPTS:
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "logprobs": 2}
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=WAIT)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        results.append({"text": choice["text"], "logprobs": choice["logprobs"]})
    return results


def streamed(url: str, prompt: str) -> str:
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "stream": True}
    text = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=WAIT) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                text.append(json.loads(line[6:])["choices"][0]["text"])
    return "".join(text)


def same(ours: list[dict], reference: list[dict]) -> None:
    for a, b in zip(ours, reference):
        assert a["text"] == b["text"]
        assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
        for x, y in zip(a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"]):
            assert x == pytest.approx(y, abs=1e-4)


@pytest.fixture(scope="module")
def spec_server(tiny_model):
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), speculative_config=SPEC, **ENGINE_ARGS)
    live = start_server(llm, ServerConfig(served_model_name="tiny", **CAPS))
    yield live
    live.stop()


def test_in_process_server_gives_the_same_completions_and_counts(server, spec_server):
    same(completions(spec_server.url), completions(server.url))
    assert streamed(spec_server.url, PROMPTS[0]) == streamed(server.url, PROMPTS[0])
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{spec_server.url}/metrics").text)}
    values = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
        family = families[f"vllm:spec_decode_{name}"]
        assert family.type == "counter"
        values[name] = [(s.labels, s.value) for s in family.samples if s.name.endswith("_total")]
    assert values["num_drafts"][0][1] > 0
    per_pos = values["num_accepted_tokens_per_pos"]
    assert [labels["position"] for labels, _ in per_pos] == ["0", "1", "2"]
    assert sum(v for _, v in per_pos) == values["num_accepted_tokens"][0][1] > 0
    assert values["num_accepted_tokens"][0][1] <= values["num_draft_tokens"][0][1]
    plain = httpx.get(f"{server.url}/metrics").text
    assert "spec_decode" not in plain  # as vLLM: only a server that speculates exports them


def test_engine_core_process_gives_the_same_completions(server, tiny_model):
    config = EngineConfig(model=str(tiny_model("qwen3")), speculative_config=SPEC, **ENGINE_ARGS)
    live = start_server(None, ServerConfig(served_model_name="tiny", **CAPS), engine_config=config)
    try:
        same(completions(live.url), completions(server.url))
        assert "vllm:spec_decode_num_drafts_total" in httpx.get(f"{live.url}/metrics").text
    finally:
        live.stop()


def test_a_client_dropped_mid_speculation_leaves_nothing_behind(tiny_model):
    """A draft-model server, held by its step gate so the drop provably comes between verifying steps: the
    aborted completions free every KV block, the counters stay consistent, and once the next request has
    run, neither the runner nor the draft holds anything of them."""
    from model_optimizer import LLM

    target = str(tiny_model("qwen3"))
    spec = {"model": target, "num_speculative_tokens": 3, "adaptive": False}
    llm = LLM(target, speculative_config=spec, **ENGINE_ARGS)
    live = start_server(llm, ServerConfig(served_model_name="tiny", **CAPS))
    engine = live.state.engine
    body = {"prompt": PROMPTS[0], "max_tokens": 60, "ignore_eos": True, "stream": True, "n": 2, "temperature": 0.8}
    try:
        with engine.gate.held() as gate:
            with httpx.stream("POST", f"{live.url}/v1/completions", json=body, timeout=WAIT) as r:
                assert r.status_code == 200 and gate.wait_parked(WAIT)
                assert gate.run_until(lambda: engine.stats.spec_num_drafts >= 4, WAIT)  # both, twice each
                lines = r.iter_lines()  # kept referenced: a dropped iterator closes the response (a disconnect)
                next(line for line in lines if line.startswith("data: {"))
                assert engine.stats.num_free_blocks < engine.stats.num_blocks
                dropped = set(llm.runner.drafter.computed)  # both completions, as the engine names them
                assert len(dropped) == 2 and dropped <= set(llm.runner.batch.requests)
            wait_for(lambda: live.state.num_admitted == 0, "the server saw the client leave")
            assert gate.wait_parked(WAIT)  # the aborts are applied, the engine still held
            stats = engine.stats
            assert stats.num_free_blocks == stats.num_blocks and stats.num_running == stats.num_waiting == 0
        assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens == 3 * stats.spec_num_drafts
        assert sum(stats.spec_accepted_per_pos) == stats.spec_num_accepted_tokens
        scraped = httpx.get(f"{live.url}/metrics").text
        assert metric(scraped, "vllm:spec_decode_num_draft_tokens_total") == stats.spec_num_draft_tokens
        after = httpx.post(f"{live.url}/v1/completions", json={**body, "stream": False, "n": 1}, timeout=WAIT)
        assert after.status_code == 200
        assert not dropped & (set(llm.runner.drafter.computed) | set(llm.runner.batch.requests))
    finally:
        live.stop()


def test_stats_line_reports_the_mean_acceptance_length():
    common = dict(num_running=1, num_waiting=0, kv_cache_usage=0.1, prefix_cache_queries=0, prefix_cache_hits=0)
    before = SimpleNamespace(
        **common,
        num_prompt_tokens=0,
        num_generation_tokens=0,
        spec_num_drafts=10,
        spec_num_draft_tokens=40,
        spec_num_accepted_tokens=20,
    )
    after = SimpleNamespace(
        **common,
        num_prompt_tokens=10,
        num_generation_tokens=100,
        spec_num_drafts=30,
        spec_num_draft_tokens=120,
        spec_num_accepted_tokens=50,
    )
    line = stats_line(before, after, 1.0)
    assert "mean acceptance length 2.50" in line and "acceptance rate 37.5%" in line
    assert "spec decode" not in stats_line(after, SimpleNamespace(**{**vars(after), "num_prompt_tokens": 20}), 1.0)
