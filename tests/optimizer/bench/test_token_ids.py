"""Chunks that carry token ids but no text (a model served without a tokenizer) are tokens to time."""

import pytest

from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import RunPlan
from model_optimizer.optimizer.bench.metrics import summarize
from model_optimizer.optimizer.bench.request_options import request_body
from tests.optimizer.bench.util import make_requests, run_plan


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_id_only_chunks_are_timed_and_counted(server, valve, endpoint):
    records = run_plan(
        server.base_url,
        RunPlan("closed", concurrency=2, num_requests=4),
        make_requests(4, output_len=6),
        model="ids-only",
        endpoint=endpoint,
    )
    assert all(r.ok for r in records), [r.error_detail for r in records]
    for r in records:
        assert not r.usage_reported
        assert len(r.chunk_times) == 3 and r.chunk_tokens == [2, 2, 2]  # three chunks of two ids, no text
        assert r.output_tokens == 6  # counted from token_ids, not one per chunk
        assert r.ttft is not None and r.send <= r.chunk_times[0]
    s = summarize(records)
    assert s["output_tokens"] == 24 and s["itl_ms"]["count"] == 4 * 4  # one per token after the first chunk's


def test_return_token_ids_is_sent_only_when_asked():
    [req] = make_requests(1)
    assert b"return_token_ids" not in request_body(ClientConfig(), req)
    assert b'"return_token_ids": true' in request_body(ClientConfig(return_token_ids=True), req)
