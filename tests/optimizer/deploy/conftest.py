"""Rendered deployments (every target, both engines, the built-in model and a tuned config) and a live
server of ours to check the dashboard's and alerts' metric names against."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.optimizer.deploy.config import DeployConfig
from model_optimizer.optimizer.deploy.output import write
from model_optimizer.optimizer.deploy.render import render
from model_optimizer.optimizer.deploy.settings import ServeSettings
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

TUNED = {
    "max_num_seqs": 96,
    "max_num_batched_tokens": 4096,
    "enable_prefix_caching": False,
    "kv_cache_dtype": "fp8",
    "gpu_memory_utilization": 0.85,
    "block_size": 32,
    "max_n": 4,
    "max_queued_requests": 64,
    "metrics_auth": True,
    "api_key": "sk-never-in-a-file",
    "shutdown_timeout": 90.0,
}
"""A configuration as a tuner might write it: engine and server settings, metrics behind the key."""

CASES = [
    (target, engine, tuned)
    for target in ("docker", "compose", "k8s")
    for engine in ("mopt", "vllm")
    for tuned in (False, True)
]


def settings_for(tuned: bool, model: str | None = None) -> ServeSettings:
    values = dict(TUNED) if tuned else {}
    engine = {k: v for k, v in values.items() if k in EngineConfig.__dataclass_fields__}
    server = {k: v for k, v in values.items() if k in ServerConfig.__dataclass_fields__}
    return ServeSettings(EngineConfig(model=model, **engine), ServerConfig(**server))


@pytest.fixture(scope="session")
def deployments(tmp_path_factory):
    """(target, engine, tuned) -> the folder its files were written to."""
    root = tmp_path_factory.mktemp("deployments")
    folders = {}
    for target, engine, tuned in CASES:
        out = root / f"{target}-{engine}-{'tuned' if tuned else 'default'}"
        deploy = DeployConfig(target=target, engine=engine, output=str(out), driver="570.133.20")
        write(render(settings_for(tuned), deploy), out, with_source=False)
        folders[(target, engine, tuned)] = out
    return folders


@pytest.fixture(scope="session")
def live_metrics(tiny_model):
    """/metrics text of a live server of ours after one finished request (every family has samples)."""
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=8)
    live = start_server(llm, ServerConfig(served_model_name="tiny"))
    try:
        r = httpx.post(
            f"{live.url}/v1/completions", json={"prompt": "deploy", "max_tokens": 3, "ignore_eos": True}, timeout=60
        )
        assert r.status_code == 200
        yield httpx.get(f"{live.url}/metrics").text
    finally:
        live.stop()
