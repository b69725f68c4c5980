"""LLM on an encoder folder (MiniLM) with engine settings an embedding model has no use for: cpu_offload_gb
and kv_offloading_size were taken without a word, where `mopt serve` of the same folder names them in a
warning. Both now give the one warning, and the model still embeds."""

from __future__ import annotations

import logging

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.app import load_embedder

WARNING = "settings that do not apply to an embedding model are ignored: cpu_offload_gb, kv_offloading_size"
OFFLOAD = dict(cpu_offload_gb=1.0, kv_offloading_size=2.0)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_offline_api_names_the_ignored_offload_settings_as_serve_does(minilm_dir, caplog):
    from model_optimizer import LLM

    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.llm"):
        llm = LLM(str(minilm_dir), device="cpu", **OFFLOAD)
    assert warnings_of(caplog) == [WARNING]
    assert len(llm.embed(["offload nothing"])[0].outputs.embedding) == 384
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.server.app"):
        load_embedder(EngineConfig(model=str(minilm_dir), device="cpu", **OFFLOAD), minilm_dir)
    assert warnings_of(caplog) == [WARNING]


def test_no_warning_when_every_setting_applies(minilm_dir, caplog):
    from model_optimizer import LLM

    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.llm"):
        LLM(str(minilm_dir), device="cpu", dtype="float32", max_model_len=128)
    assert warnings_of(caplog) == []
