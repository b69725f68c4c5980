"""Valid requests under cache pressure: more completions (n) than may run at once, in a cache that holds
one of them at a time, run to their end through preemptions; the server stays up and frees every block."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer import LLM
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

PROMPT = list(range(11, 21))


@pytest.fixture(scope="module")
def squeezed(tiny_model):
    """As `mopt serve --max-model-len 256 --num-kv-blocks 24 --max-num-seqs 4`: one 250-token
    sequence needs 16 of the 24 blocks."""
    llm = LLM(str(tiny_model("qwen3")), max_model_len=256, num_kv_blocks=24, max_num_seqs=4)
    live = start_server(llm, ServerConfig(served_model_name="tiny", max_n=16, max_tokens_limit=256))
    yield live
    live.stop()


@pytest.mark.slow
@pytest.mark.parametrize("n", [6, 16])
def test_n_above_max_num_seqs_under_cache_pressure_completes(squeezed, n):
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 240, "n": n, "ignore_eos": True, "temperature": 1.0}
    r = httpx.post(squeezed.url + "/v1/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert sorted(c["index"] for c in choices) == list(range(n))
    assert all(c["finish_reason"] == "length" for c in choices)
    assert r.json()["usage"]["completion_tokens"] == 240 * n
    assert httpx.get(squeezed.url + "/health").status_code == 200
    stats = squeezed.state.engine.stats
    assert stats.num_free_blocks == stats.num_blocks and stats.num_preemptions > 0  # it was squeezed
