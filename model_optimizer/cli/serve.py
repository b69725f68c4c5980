"""`mopt serve`: an OpenAI-compatible server (completions, chat, metrics) over the engine."""

from __future__ import annotations

import argparse

from model_optimizer.cli.args import add_config_file_arg, add_dataclass_args, dataclass_from_args, read_config_file
from model_optimizer.runtime import vllm_settings


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
        "model_tag", nargs="?", metavar="MODEL", default=None, help="model folder or Hub id (the same as --model)"
    )
    add_config_file_arg(parser, EngineConfig, ServerConfig, extra=tuple(vllm_settings.BY_NAME))
    add_dataclass_args(parser, EngineConfig)
    add_dataclass_args(parser, ServerConfig)
    vllm_settings.add_args(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    import os

    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.hub import localize
    from model_optimizer.runtime.server.config import API_KEY_ENV, VLLM_API_KEY_ENV, ServerConfig, check_api_key

    if args.model_tag is not None:
        if args.model is not None and args.model != args.model_tag:
            raise ValueError(f"two models given: {args.model_tag} (positional) and --model {args.model}; give one")
        args.model = args.model_tag
    engine_config = dataclass_from_args(EngineConfig, args)
    server_config = dataclass_from_args(ServerConfig, args)
    ignored = vllm_settings.ignored(_vllm_only(args))  # a refused value: before anything starts
    notes = ["vLLM flags ignored: " + "; ".join(ignored)] if ignored else []
    env_name = next((n for n in (API_KEY_ENV, VLLM_API_KEY_ENV) if os.environ.get(n) is not None), API_KEY_ENV)
    env_key = os.environ.get(env_name)
    if server_config.api_key is None and env_key is not None:  # set but empty is refused, not "no auth"
        check_api_key(env_key, env_name)
        server_config.api_key = env_key
    from model_optimizer.runtime.server.frontends import reserve

    sock = reserve(server_config.host, server_config.port)  # before the model loads: the port is ours
    core_start = None
    try:
        model_id = localize(engine_config)  # a Hub id becomes its snapshot folder, downloaded or from the cache
        if model_id is not None and server_config.served_model_name is None:
            server_config.served_model_name = model_id  # clients ask for Qwen/Qwen3-0.6B, as with vLLM
        core_start = _spawn_core_early(server_config, engine_config)
        if server_config.api_server_count > 1:
            return _serve_many(server_config, engine_config, core_start, sock, notes)
        from model_optimizer.runtime.server.launcher import serve

        return serve(server_config, engine_config, core_start, sock, notes)
    finally:
        sock.close()
        if core_start is not None:
            core_start.abandon()  # nothing, once the server took it


def _spawn_core_early(server_config, engine_config):  # noqa: ANN001, ANN202
    """The engine core of a causal-LM folder, spawned before the HTTP side is imported and set up, so
    the two start-ups overlap (its imports, CUDA context and load against ours); None for anything else
    (an embedding model, a folder the app will refuse with a clear message), left to the app as before."""
    import json

    from model_optimizer.runtime.hub import resolve_model_dir

    try:
        model_dir = resolve_model_dir(engine_config.model, engine_config.revision)
        config = json.loads((model_dir / "config.json").read_text())  # not read_config: it imports torch
    except (OSError, ValueError):
        return None
    from model_optimizer.runtime.models.registry import TEXT_OF_MULTIMODAL

    architecture = str((config.get("architectures") or [""])[0])
    generates = architecture.endswith("ForCausalLM") or architecture in TEXT_OF_MULTIMODAL  # Gemma 3 4B-27B too
    if (model_dir / "modules.json").is_file() or not generates:
        return None
    import os

    from model_optimizer.runtime.core_process import spawn_core
    from model_optimizer.runtime.server.config import LOG_LEVELS

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # as the app's quiet_transformers: the core inherits it

    level = LOG_LEVELS[server_config.log_level.lower()]  # a number: logging has no "trace" before uvicorn's import
    return spawn_core(engine_config, server_config.api_server_count, level)


def _vllm_only(args: argparse.Namespace) -> dict:
    """The vLLM-only settings of the --config file and the command line, the flags winning."""
    names = tuple(vllm_settings.BY_NAME)
    in_file = read_config_file(args.config_file, args.config_classes, names) if args.config_file else {}
    return {k: v for k, v in in_file.items() if k in names} | vllm_settings.from_args(args)


def _serve_many(server_config, engine_config, core_start, sock, notes) -> int:  # noqa: ANN001
    """Several frontends, their metrics in one prometheus_client multiprocess folder."""
    import os
    import shutil
    import tempfile

    from model_optimizer.runtime.server.frontends import MULTIPROC_ENV, use_multiprocess_metrics

    ours = not os.environ.get(MULTIPROC_ENV)
    folder = tempfile.mkdtemp(prefix="mopt-metrics-") if ours else os.environ[MULTIPROC_ENV]
    use_multiprocess_metrics(folder)
    from model_optimizer.runtime.server.launcher import serve

    try:
        return serve(server_config, engine_config, core_start, sock, notes)
    finally:
        if ours:
            shutil.rmtree(folder, ignore_errors=True)
