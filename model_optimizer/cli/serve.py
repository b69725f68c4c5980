"""`mopt serve`: an OpenAI-compatible server (completions, chat, metrics) over the engine."""

from __future__ import annotations

import argparse

from model_optimizer.cli.args import add_config_file_arg, add_dataclass_args, dataclass_from_args


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    parser = subparsers.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model (the built-in default when none is given) over an OpenAI-compatible "
        "API: /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models, /tokenize, /detokenize, "
        "/health, /ready, /version, /metrics (and /pause, /resume, /is_paused with --enable-pause). As with `vllm serve`, the model folder may come first: "
        "`mopt serve ./model`.",
    )
    parser.add_argument(
        "model_tag", nargs="?", metavar="MODEL", default=None, help="model folder (the same as --model)"
    )
    add_config_file_arg(parser, EngineConfig, ServerConfig)
    add_dataclass_args(parser, EngineConfig)
    add_dataclass_args(parser, ServerConfig)
    return parser


def run(args: argparse.Namespace) -> int:
    import os

    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import API_KEY_ENV, ServerConfig, check_api_key
    from model_optimizer.runtime.server.launcher import serve

    if args.model_tag is not None:
        if args.model is not None and args.model != args.model_tag:
            raise ValueError(f"two models given: {args.model_tag} (positional) and --model {args.model}; give one")
        args.model = args.model_tag
    engine_config = dataclass_from_args(EngineConfig, args)
    server_config = dataclass_from_args(ServerConfig, args)
    env_key = os.environ.get(API_KEY_ENV)
    if server_config.api_key is None and env_key is not None:  # set but empty is refused, not "no auth"
        check_api_key(env_key, API_KEY_ENV)
        server_config.api_key = env_key
    return serve(server_config, engine_config)
