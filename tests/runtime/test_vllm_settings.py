"""vLLM engine settings with no use here: LLM(...) and `mopt serve` take them with one warning naming each
and why; a value asking for what this engine does not do is refused with the reason."""

from __future__ import annotations

import logging

import httpx
import pytest

from model_optimizer import LLM, SamplingParams
from tests.runtime.server.test_startup import LINE, Server, assert_config_error, run_serve

SMALL = dict(max_model_len=64, num_kv_blocks=32)
VLLM_ARGS = dict(trust_remote_code=True, disable_log_stats=True, swap_space=4, tokenizer_mode="auto")


def test_llm_takes_vllm_only_settings_and_names_them_in_one_warning(tiny_model, caplog):
    with caplog.at_level(logging.WARNING, logger="model_optimizer"):
        llm = LLM(str(tiny_model("qwen3")), **SMALL, **VLLM_ARGS)
    [warning] = [r.getMessage() for r in caplog.records if "vLLM settings ignored" in r.getMessage()]
    assert "trust_remote_code (checkpoints run on this engine's own model code" in warning
    assert "swap_space (" in warning and "disable_log_stats (" in warning
    out = llm.generate(["hi"], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"pipeline_parallel_size": 2}, "pipeline_parallel_size > 1 is not supported"),
        ({"data_parallel_size": 4}, "data_parallel_size > 1 is not supported"),
        ({"enable_lora": True}, "LoRA adapters are not supported"),
        ({"tokenizer_mode": "mistral"}, "tokenizer_mode 'mistral' is not supported"),
    ],
)
def test_llm_refuses_what_this_engine_does_not_do(tiny_model, setting, message):
    with pytest.raises(ValueError, match=message):
        LLM(str(tiny_model("qwen3")), **SMALL, **setting)


def test_an_unknown_setting_is_still_a_type_error(tiny_model):
    with pytest.raises(TypeError, match="not_a_setting"):
        LLM(str(tiny_model("qwen3")), not_a_setting=1)


@pytest.mark.slow
def test_a_vllm_serve_command_line_runs_and_warns_once(tiny_model):
    server = Server(
        str(tiny_model("qwen3")),
        *("--max-model-len", "64", "--num-kv-blocks", "32"),
        *("--trust-remote-code", "--disable-log-requests", "--swap-space", "4", "--distributed-executor-backend", "mp"),
    )
    try:
        index = server.wait_for_line("vLLM flags ignored: ")
        line = server.lines[index]
        assert LINE.match(line) and " WARNING " in line, line
        for name in ("trust_remote_code", "disable_log_requests", "swap_space", "distributed_executor_backend"):
            assert f"{name} (" in line
        assert httpx.get(server.url + "/ready", timeout=30).json() == {"status": "ready"}
    finally:
        server.stop()


@pytest.mark.slow
def test_serve_refuses_pipeline_parallelism_before_it_starts(tiny_model):
    run = run_serve(str(tiny_model("qwen3")), "--pipeline-parallel-size", "2")
    assert_config_error(run, "pipeline_parallel_size > 1 is not supported")
