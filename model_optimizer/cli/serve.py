"""`mopt serve`: an OpenAI-compatible server (completions, chat, metrics) over the engine."""

from __future__ import annotations

import argparse

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.config import EngineConfig
    from model_optimizer.server.config import ServerConfig

    parser = subparsers.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model (the built-in default when --model is not given) over an OpenAI-compatible "
        "API: /v1/completions, /v1/chat/completions, /v1/models, /health, /ready, /version, /metrics.",
    )
    add_dataclass_args(parser, EngineConfig)
    add_dataclass_args(parser, ServerConfig)
    return parser


def run(args: argparse.Namespace) -> int:
    import os

    from model_optimizer.config import EngineConfig
    from model_optimizer.server.config import API_KEY_ENV, ServerConfig
    from model_optimizer.server.launcher import serve

    engine_config = dataclass_from_args(EngineConfig, args)
    server_config = dataclass_from_args(ServerConfig, args)
    if server_config.api_key is None and os.environ.get(API_KEY_ENV):
        server_config.api_key = os.environ[API_KEY_ENV]
    return serve(server_config, engine_config)
