"""Streams read DELTA outputs, plain requests one FINAL_ONLY output; metrics and usage count the same
tokens either way (each output's tokens are new, nothing is sliced back out of cumulative copies)."""

from __future__ import annotations

import json

import httpx
import pytest

from model_optimizer.runtime.sampling_params import RequestOutputKind
from model_optimizer.runtime.server.protocol import CompletionRequest
from model_optimizer.runtime.server.sampling import sampling_params
from tests.runtime.server.live import metric


@pytest.mark.parametrize("stream, kind", [(True, RequestOutputKind.DELTA), (False, RequestOutputKind.FINAL_ONLY)])
def test_streams_ask_for_deltas_and_plain_requests_for_the_final_output(stream, kind):
    body = CompletionRequest(prompt="x", stream=stream)
    assert sampling_params(body, [], 4, None).output_kind is kind


def counts(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    reasons = {}
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="length"' in line:
            reasons["length"] = float(line.rsplit(" ", 1)[1])
    return {
        "itl": metric(text, "vllm:inter_token_latency_seconds_count"),
        "ttft": metric(text, "vllm:time_to_first_token_seconds_count"),
        "output_len": metric(text, "vllm:request_generation_tokens_sum"),
        "n": metric(text, "vllm:request_params_n_sum"),
        "length": reasons.get("length", 0.0),
    }


@pytest.mark.parametrize("stream", [False, True])
def test_metrics_and_usage_count_every_token_once(server, stream):
    """n=2 completions of 6 tokens: 12 output tokens, 2 'length' finishes, a TTFT per completion (as vLLM
    observes each child request's), and an inter-token latency for each token after each completion's first (10)."""
    before = counts(server.url)
    body = {"prompt": "count me", "max_tokens": 6, "ignore_eos": True, "n": 2, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    if stream:
        events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
        chunks = [json.loads(e) for e in events[:-1]]
        usage = chunks[-1]["usage"]
        finishes = sorted(c["finish_reason"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"])
    else:
        usage = r.json()["usage"]
        finishes = sorted(c["finish_reason"] for c in r.json()["choices"])
    assert usage["completion_tokens"] == 12 and finishes == ["length", "length"]
    after = counts(server.url)
    change = {k: after[k] - before[k] for k in after}
    assert change["output_len"] == 12 and change["n"] == 2 and change["length"] == 2
    assert change["ttft"] == 2
    assert change["itl"] == 10
