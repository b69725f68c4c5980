"""A model's generation_config.json fills the sampling fields a request leaves unset; what it sends wins."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server


@pytest.fixture(scope="module")
def defaults_server(tiny_model, tmp_path_factory):
    """The tiny Qwen3 whose generation_config.json sets sampling defaults (as Qwen3's own does)."""
    from model_optimizer import LLM

    out = tmp_path_factory.mktemp("gen_defaults") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    config = json.loads((out / "generation_config.json").read_text())
    config.update(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=5)
    (out / "generation_config.json").write_text(json.dumps(config))
    live = start_server(LLM(str(out), max_model_len=128, num_kv_blocks=64), ServerConfig())
    sent = []
    add_request = live.state.engine.add_request

    async def recording(request_id, prompt, params, *args, **kwargs):
        sent.append(params)
        return await add_request(request_id, prompt, params, *args, **kwargs)

    live.state.engine.add_request = recording
    yield live, sent
    live.stop()


def test_generation_config_defaults_fill_unset_fields(defaults_server):
    live, sent = defaults_server
    r = httpx.post(live.url + "/v1/completions", json={"prompt": [5, 6, 7], "ignore_eos": True}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5  # max_new_tokens
    p = sent[-1]
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens) == (0.6, 0.95, 20, 5)
    body = {"prompt": [5, 6, 7], "temperature": 0.0, "top_k": -1, "max_tokens": 7, "ignore_eos": True}
    r = httpx.post(live.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5  # max_new_tokens caps it, as vLLM
    p = sent[-1]
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens) == (0.0, 0.95, 0, 5)  # what the request sent wins, but
    # max_new_tokens caps max_tokens (vLLM's get_max_tokens takes the smallest)
    chat = httpx.post(
        live.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True},
        timeout=60,
    )
    assert chat.status_code == 200 and sent[-1].temperature == 0.6 and sent[-1].max_tokens == 5
