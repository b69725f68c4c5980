"""`mopt deploy`: Docker, Compose (Prometheus, Grafana) or Kubernetes files for the settings `mopt serve` reads."""

from __future__ import annotations

import argparse

from model_optimizer.cli.args import add_config_file_arg, add_dataclass_args, dataclass_from_args


def add_parser(subparsers) -> argparse.ArgumentParser:
    from model_optimizer.optimizer.deploy.config import DeployConfig
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    parser = subparsers.add_parser(
        "deploy",
        help="write Dockerfile, Compose or Kubernetes files that serve a model with given settings",
        description="Render deployment files from the settings `mopt serve` reads (--config FILE and/or serve flags): "
        "a Dockerfile (CUDA base for the host driver, non-root, model mounted read-only, health check), "
        "docker-compose.yml with Prometheus, Grafana and a GPU exporter, or Kubernetes manifests. "
        "--engine vllm runs `vllm serve` with the settings translated. "
        "--model, --tokenizer and a draft model must be folders on this host: they are mounted into the container "
        "(a Hugging Face Hub id is refused: download it first). --output must be new, empty, or a folder "
        "`mopt deploy` wrote before: only the files it listed there are replaced.",
    )
    add_config_file_arg(parser, EngineConfig, ServerConfig)
    add_dataclass_args(parser, DeployConfig)
    add_dataclass_args(parser, EngineConfig)
    add_dataclass_args(parser, ServerConfig)
    return parser


def run(args: argparse.Namespace) -> int:
    import sys

    from model_optimizer.optimizer.deploy.config import DeployConfig
    from model_optimizer.optimizer.deploy.dockerfile import driver_warning
    from model_optimizer.optimizer.deploy.output import check_output, write
    from model_optimizer.optimizer.deploy.render import host_build, render
    from model_optimizer.optimizer.deploy.settings import ServeSettings
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.config import ServerConfig

    deploy = dataclass_from_args(DeployConfig, args)
    settings = ServeSettings(dataclass_from_args(EngineConfig, args), dataclass_from_args(ServerConfig, args))
    with_source = deploy.engine == "mopt"  # our server installs from a copy of the source; vLLM's image has its own
    check_output(deploy.output, settings.host_model_dir, with_source)
    files = render(settings, deploy)
    written = write(files, deploy.output, with_source)
    print(f"wrote {len(written)} files for {deploy.target} ({deploy.engine}) under {deploy.output}:")
    for path in written:
        print(f"  {path}")
    driver, cuda = host_build(deploy)
    warning = driver_warning(cuda, driver)
    if warning:  # also in the Dockerfile and README, where it is easily missed
        print(f"mopt deploy: warning: {warning}", file=sys.stderr)
    return 0
