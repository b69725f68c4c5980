"""The model's own sampling defaults: its generation_config.json (or another folder's, or none) with
EngineConfig's override_generation_config over it, as SamplingParams fields. Read before the weights
load, so that a bad file or override fails in a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.sampling_params import generation_config_defaults


def config_generation_defaults(config: EngineConfig, model_dir: Path) -> dict[str, Any]:
    """generation_defaults as `config` sets them (its generation_config and override_generation_config)."""
    return generation_defaults(model_dir, config.generation_config, config.override_generation_config)


def generation_defaults(
    model_dir: Path, source: str = "auto", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """SamplingParams fields set by a generation_config.json and `overrides` over it (EngineConfig's
    generation_config and override_generation_config): `source` auto reads the model folder's file (none:
    no defaults), vllm reads none, anything else is a folder that must hold one.

    Raises ValueError naming the file when it is not JSON or a value is not allowed.
    """
    folder = model_dir if source == "auto" else None if source == "vllm" else Path(source).expanduser()
    path = folder / "generation_config.json" if folder is not None else None
    if path is not None and not path.is_file() and source != "auto":
        raise ValueError(f"generation_config: {folder} holds no generation_config.json (auto, vllm or such a folder)")
    config: Any = {}
    if path is not None and path.is_file():
        from model_optimizer.common.fileio import read_json

        config = read_json(path)
        if not isinstance(config, dict):
            raise ValueError(f"{path}: expected a JSON object")
    for where, given in ((path, config), ("override_generation_config", {**config, **(overrides or {})})):
        try:
            values = generation_config_defaults(given)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return values
