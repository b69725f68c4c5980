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


def test_server_with_swap_preemption_gives_the_unpreempted_tokens(tiny_model):
    """`mopt serve --preemption-mode swap` (the flag parsed as the CLI does): six prompts at once squeeze a
    16-block pool, and the token ids are those of an engine that never preempts."""
    from model_optimizer.cli.args import dataclass_from_args
    from model_optimizer.cli.main import build_parser

    model = str(tiny_model("qwen3"))
    prompts = [[(i * 31 + j * 7) % 900 + 5 for j in range(14 + 5 * i)] for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    small = ["--block-size", "4", "--max-model-len", "64", "--num-kv-blocks", "16", "--dtype", "float32"]
    expected = [o.outputs[0].token_ids for o in LLM(model, dtype="float32", max_model_len=64).generate(prompts, params)]
    flags = ["serve", model, "--preemption-mode", "swap", "--kv-offloading-size", "0.001", *small]
    args = build_parser().parse_args(flags)
    args.model = args.model_tag
    config = dataclass_from_args(EngineConfig, args)
    assert config.preemption_mode == "swap"
    live = start_server(None, ServerConfig(served_model_name="m"), engine_config=config)
    try:
        body = {"model": "m", "prompt": prompts, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        body["return_token_ids"] = True
        response = httpx.post(f"{live.url}/v1/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        assert [c["token_ids"] for c in choices] == expected
        metrics = httpx.get(f"{live.url}/metrics", timeout=30).text
        totals = {line.split("{")[0]: float(line.split()[-1]) for line in metrics.splitlines() if "_total{" in line}
        assert totals["vllm:num_preemptions_total"] > 0
        assert totals["mopt:swapped_out_blocks_total"] > 0  # preempted requests went to host memory...
        assert totals["mopt:swapped_in_blocks_total"] == totals["mopt:swapped_out_blocks_total"]  # ...and all came back
    finally:
        live.stop()
