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
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"max_tokens_limit": 0}, "max_tokens_limit"),
    ],
)
def test_bad_values_are_clear_errors(changes, fragment):
    with pytest.raises(ValueError, match=fragment):
        ServerConfig(**changes)


def test_cli_bad_flag_exits_2_with_message(capsys):
    assert main(["serve", "--port", "70000"]) == 2
    assert "port must be in [0, 65535]" in capsys.readouterr().err


def test_public_paths_and_metrics_auth():
    assert is_public("/health", ServerConfig()) and is_public("/metrics", ServerConfig())
    assert not is_public("/metrics", ServerConfig(metrics_auth=True))
    for path in ("/health/", "//health", "/Health", "/v1/models", "/"):
        assert not is_public(path, ServerConfig())


def test_authorized_header_forms():
    assert authorized([(b"authorization", b"Bearer k1")], "k1")
    assert authorized([(b"Authorization", b"bearer k1")], "k1")
    assert not authorized([(b"authorization", b"Bearer k2")], "k1")
    assert not authorized([(b"x-api-key", b"k1")], "k1")
    assert not authorized([], "k1")
