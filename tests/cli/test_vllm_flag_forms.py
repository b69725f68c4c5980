"""`mopt serve` takes the spellings `vllm serve` takes: --no- switches, -ep / -asc, quoted numbers in a
--config file, and --max-model-len auto / -1 / with spaces (parsed as main() does; no server starts)."""

from __future__ import annotations

import pytest

from model_optimizer.cli.args import dataclass_from_args
from model_optimizer.cli.main import build_parser, dashed_flags, long_options
from model_optimizer.runtime import vllm_settings
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig


def parsed(*flags: str):
    argv = ["serve", "m", *flags]
    parser = build_parser(argv)
    args = parser.parse_args(dashed_flags(argv, long_options(parser)))
    return args, dataclass_from_args(EngineConfig, args), dataclass_from_args(ServerConfig, args)


def test_vllm_switches_take_their_no_form():
    args, _, _ = parsed("--no-trust-remote-code", "--no-enable-log-requests", "--no-disable-custom-all-reduce")
    given = vllm_settings.from_args(args)
    assert given["trust_remote_code"] is False and given["enable_log_requests"] is False
    assert vllm_settings.ignored(given) == []  # off is vLLM's default: nothing to warn about
    assert vllm_settings.from_args(parsed("--trust-remote-code")[0])["trust_remote_code"] is True
    with pytest.raises(SystemExit):  # vLLM's --disable-log-stats is store_true: no --no- form there either
        parsed("--no-disable-log-stats")


def test_vllms_short_flags_for_expert_parallel_and_api_servers():
    _, engine, server = parsed("-ep", "-asc", "2")
    assert engine.enable_expert_parallel is True and server.api_server_count == 2
    assert parsed("--no-enable-expert-parallel")[1].enable_expert_parallel is False


def test_quoted_numbers_in_a_config_file_take_the_flags_type(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text('port: "8001"\nmax_num_seqs: " 64"\ngpu_memory_utilization: "0.8"\n')
    _, engine, server = parsed("--config", str(config))
    assert (server.port, engine.max_num_seqs, engine.gpu_memory_utilization) == (8001, 64, 0.8)
    config.write_text('port: "eighty"\n')
    with pytest.raises(ValueError, match="port must be a int"):
        parsed("--config", str(config))


@pytest.mark.parametrize(("given", "taken"), [("auto", None), ("-1", None), ("AUTO", None), (" 32k", 32000)])
def test_max_model_len_takes_vllms_forms(given, taken):
    assert parsed("--max-model-len", given)[1].max_model_len == taken


def test_max_model_len_auto_overrides_a_config_file_and_reads_from_one(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("max_model_len: 4096\n")
    assert parsed("--config", str(config), "--max-model-len", "auto")[1].max_model_len is None
    config.write_text("max_model_len: auto\n")
    assert parsed("--config", str(config))[1].max_model_len is None
    config.write_text("max_model_len: -1\n")
    assert parsed("--config", str(config))[1].max_model_len is None
    assert EngineConfig(max_model_len=-1).max_model_len is None
