"""ServerConfig validation, the CLI's handling of bad flags, and the public-path rule."""

from __future__ import annotations

import pytest

from model_optimizer.cli.main import main
from model_optimizer.runtime.server.auth import authorized, is_public
from model_optimizer.runtime.server.config import ServerConfig


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"port": 70000}, "port"),
        ({"max_n": 0}, "max_n"),
        ({"max_logprobs": 21}, "max_logprobs"),
        ({"max_logprobs": -2}, "max_logprobs"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"shutdown_timeout": float("nan")}, "shutdown_timeout"),
        ({"shutdown_timeout": float("inf")}, "shutdown_timeout"),
        ({"log_interval": float("nan")}, "log_interval"),
        ({"api_key": ""}, "api_key is empty"),
        ({"api_key": "   "}, "api_key is empty"),
        ({"api_key": " sk-1"}, "whitespace"),
        ({"max_tokens_limit": 0}, "max_tokens_limit"),
        ({"max_logprobs": "5"}, "max_logprobs must be an integer"),  # from Python code: not a TypeError
        ({"max_tokens_limit": "64"}, "max_tokens_limit"),
        ({"header_timeout": "5"}, "header_timeout"),
        ({"shutdown_timeout": True}, "shutdown_timeout"),
        ({"log_level": "verbose"}, "log_level must be one of critical, error, warning, info, debug, trace"),
        ({"default_chat_template_kwargs": "{nope"}, "default_chat_template_kwargs must be a JSON object"),
        ({"default_chat_template_kwargs": "[1]"}, "default_chat_template_kwargs must be a JSON object, got list"),
    ],
)
def test_bad_values_are_clear_errors(changes, fragment):
    with pytest.raises(ValueError, match=fragment):
        ServerConfig(**changes)


def test_log_level_is_stored_lower_case_as_vllm_takes_it():
    from model_optimizer.optimizer.deploy.vllm_flags import vllm_serve

    config = ServerConfig(log_level="WARNING")
    assert config.log_level == "warning"
    assert vllm_serve("/m", {"log_level": config.log_level}).argv[-2:] == ["--uvicorn-log-level", "warning"]


def test_budget_defaults_to_max_model_len_with_chunked_prefill_off():
    from model_optimizer.runtime.config import EngineConfig

    assert EngineConfig(enable_chunked_prefill=False, max_model_len=32768).max_num_batched_tokens == 32768
    assert EngineConfig(enable_chunked_prefill=False, max_model_len=4096).max_num_batched_tokens == 8192
    assert EngineConfig(max_model_len=32768).max_num_batched_tokens == 8192  # chunking on: the default
    given = EngineConfig(enable_chunked_prefill=False, max_model_len=32768, max_num_batched_tokens=40000)
    assert given.max_num_batched_tokens == 40000


def test_max_logprobs_minus_one_is_vllms_no_cap_here_twenty():
    assert ServerConfig(max_logprobs=-1).max_logprobs == 20


def test_cli_bad_flag_exits_2_with_message(capsys):
    assert main(["serve", "--port", "70000"]) == 2
    assert "port must be in [0, 65535]" in capsys.readouterr().err


MISSING_MODEL = ["--model", "/nonexistent/model"]  # should a setting pass, serve stops here (exit 2), not at a port


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--api-key", ""], "api_key is empty"),
        (["--shutdown-timeout", "nan"], "shutdown_timeout must be a number"),
        (["--header-timeout", "nan"], "header_timeout must be a number"),
        (["--log-level", "warn"], "log_level must be one of"),  # uvicorn has no "warn"
    ],
)
def test_cli_refuses_settings_that_would_be_silently_wrong(capsys, flags, fragment):
    assert main(["serve", *MISSING_MODEL, *flags]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_an_empty_api_key_in_the_environment_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("MOPT_API_KEY", "")
    assert main(["serve", *MISSING_MODEL]) == 2
    assert "MOPT_API_KEY is empty" in capsys.readouterr().err


def test_config_file_errors_name_the_file(capsys, tmp_path):
    assert main(["serve", *MISSING_MODEL, "--config", str(tmp_path)]) == 2
    assert f"config file {tmp_path} is a folder" in capsys.readouterr().err
    latin1 = tmp_path / "settings.yaml"
    latin1.write_bytes("served_model_name: caf\xe9\n".encode("latin-1"))
    assert main(["serve", *MISSING_MODEL, "--config", str(latin1)]) == 2
    err = capsys.readouterr().err
    assert f"config file {latin1} is not UTF-8 text" in err and "Traceback" not in err
    empty_key = tmp_path / "key.yaml"
    empty_key.write_text('api_key: ""\n')
    assert main(["serve", *MISSING_MODEL, "--config", str(empty_key)]) == 2
    assert "api_key is empty" in capsys.readouterr().err


def test_public_paths_and_metrics_auth():
    assert is_public("/health", ServerConfig()) and is_public("/metrics", ServerConfig())
    assert not is_public("/metrics", ServerConfig(metrics_auth=True))
    for path in ("/health/", "//health", "/Health", "/v1/models", "/"):
        assert not is_public(path, ServerConfig())


def test_authorized_header_forms():
    assert authorized([(b"authorization", b"Bearer k1")], ("k1",))
    assert authorized([(b"Authorization", b"bearer k1")], ("k1",))
    assert not authorized([(b"authorization", b"Bearer k2")], ("k1",))
    assert not authorized([(b"x-api-key", b"k1")], ("k1",))
    assert not authorized([], ("k1",))
    assert authorized([(b"authorization", b"Bearer k2")], ("k1", "k2"))  # any of several keys
    assert not authorized([(b"authorization", b"Bearer k")], ("k1", "k2"))
