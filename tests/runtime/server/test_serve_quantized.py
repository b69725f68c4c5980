"""A real server over a folder written by `mopt quantize`, and over a float folder quantized at load."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.cli.main import main
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server


@pytest.mark.parametrize("source", ["folder", "on-the-fly"])
def test_server_completes_with_quantized_weights(quant_model, tmp_path, source):
    from model_optimizer import LLM

    model = quant_model("qwen3")
    if source == "folder":
        out = tmp_path / "awq"
        args = [
            "quantize",
            str(model),
            "--method",
            "awq",
            "--output",
            str(out),
            "--num-calib-samples",
            "2",
            "--calib-seq-len",
            "64",
            "--num-eval-samples",
            "1",
            "--eval-seq-len",
            "32",
            "--device",
            "cpu",
        ]
        assert main(args) == 0
        assert main(["inspect", str(out)]) == 0  # inspect reads what quantize writes as the loader does
        llm = LLM(str(out), kv_cache_memory=1 << 22)
    else:
        llm = LLM(str(model), quantization="fp8", kv_cache_memory=1 << 22)
    live = start_server(llm, ServerConfig(served_model_name="q"))
    try:
        body = {"model": "q", "prompt": "import os", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        response = httpx.post(f"{live.url}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 4
    finally:
        live.stop()
