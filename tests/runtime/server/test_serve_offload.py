"""`mopt serve` with weight offload and the host KV tier on: the engine-core process runs both, and the
server answers with the text the plain engine gives."""

from __future__ import annotations

import httpx

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

PROMPT = "def fibonacci(n):"


def test_server_with_both_offloads_gives_the_plain_engines_text(tiny_model):
    model = str(tiny_model("qwen3"))
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    expected = LLM(model, kv_cache_memory=1 << 22).generate([PROMPT], params)[0].outputs[0].text
    config = EngineConfig(model=model, kv_cache_memory=1 << 22, cpu_offload_gb=1e-9, kv_offloading_size=1e-3)
    live = start_server(None, ServerConfig(served_model_name="m"), engine_config=config)
    try:
        body = {"model": "m", "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
        response = httpx.post(f"{live.url}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"] == expected
    finally:
        live.stop()
