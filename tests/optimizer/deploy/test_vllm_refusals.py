"""Values vLLM 0.14.1 would refuse never reach its command line: each is left out with a note, or changed to
what starts (with a note), so a translated deployment starts."""

from __future__ import annotations

from model_optimizer.cli.main import main
from model_optimizer.optimizer.deploy.settings import ServeSettings
from model_optimizer.optimizer.deploy.vllm_flags import vllm_command, vllm_serve
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def test_async_scheduling_true_is_vllms_default_and_never_explicit():
    """vLLM refuses --async-scheduling with ngram or draft-model speculation (config/vllm.py)."""
    result = vllm_serve("/m", {"async_scheduling": True, "speculative_config": NGRAM})
    assert "--async-scheduling" not in result.argv and "--speculative-config" in result.argv
    assert "vLLM's default" in result.untranslated["async_scheduling"]
    assert "--no-async-scheduling" in vllm_serve("/m", {"async_scheduling": False}).argv


def test_budget_below_max_model_len_is_raised_when_chunked_prefill_is_off():
    settings = {"enable_chunked_prefill": False, "max_model_len": 8192, "max_num_batched_tokens": 2048}
    result = vllm_serve("/m", settings)
    assert result.argv[result.argv.index("--max-num-batched-tokens") + 1] == "8192"
    assert "raised to max_model_len (8192)" in result.untranslated["max_num_batched_tokens"]
    kept = vllm_serve("/m", {**settings, "enable_chunked_prefill": True})
    assert kept.argv[kept.argv.index("--max-num-batched-tokens") + 1] == "2048" and not kept.untranslated


def test_block_size_outside_vllms_choices_is_not_passed():
    result = vllm_serve("/m", {"block_size": 48})
    assert "--block-size" not in result.argv and "1, 8, 16, 32, 64, 128, 256" in result.untranslated["block_size"]
    assert vllm_serve("/m", {"block_size": 32}).argv[-2:] == ["--block-size", "32"]


def test_shipped_template_names_are_not_passed(tmp_path, capsys):
    result = vllm_serve("/m", {"chat_template": "chatml"})
    assert "--chat-template" not in result.argv and "template_chatml.jinja" in result.untranslated["chat_template"]
    best = tmp_path / "best.yaml"
    best.write_text("chat_template: chatml\nmax_num_seqs: 8\n")
    assert main(["tune", "translate", str(best), "--to", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "--chat-template" not in out.splitlines()[0] and "not translated" in out


def test_kv_offloading_size_is_the_total_over_tensor_parallel_ranks():
    result = vllm_serve("/m", {"kv_offloading_size": 8, "tensor_parallel_size": 4, "enable_prefix_caching": True})
    assert result.argv[result.argv.index("--kv-offloading-size") + 1] == "32"
    one = vllm_serve("/m", {"kv_offloading_size": 8})
    assert one.argv[one.argv.index("--kv-offloading-size") + 1] == "8"


def test_cors_stays_off_in_a_plain_vllm_deploy():
    argv = vllm_command(ServeSettings(EngineConfig(), ServerConfig())).argv
    assert argv[argv.index("--allowed-origins") + 1] == "[]"  # vLLM's json.loads reads an empty list
    argv = vllm_command(ServeSettings(EngineConfig(), ServerConfig(allowed_origins=["https://a.example"]))).argv
    assert argv[argv.index("--allowed-origins") + 1] == '["https://a.example"]' and argv.count("--allowed-origins") == 1
