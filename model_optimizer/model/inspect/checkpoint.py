"""Everything `mopt inspect` reads from a checkpoint folder, read once: the JSON files, the
tokenizer facts and the safetensors headers. No tensor data, no transformers, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.common.fileio import read_json
from model_optimizer.model.inspect.headers import TensorInfo, read_tensors
from model_optimizer.model.inspect.leftovers import KeyClass, classify
from model_optimizer.model.inspect.tokenizer_files import TokenizerFacts, read_tokenizer
from model_optimizer.runtime.models.model_config import text_model_config


@dataclass
class Checkpoint:
    folder: Path
    config: dict
    generation_config: dict | None
    tokenizer: TokenizerFacts
    tensors: list[TensorInfo]
    adapter_config: dict | None = None
    """PEFT's adapter_config.json (lora_alpha, r), which sets the LoRA merge scale."""
    other_weight_files: list[str] = field(default_factory=list)
    """pytorch_model*.bin and the like, which the engine does not read."""

    def classified(self) -> list[tuple[TensorInfo, KeyClass]]:
        return [(t, classify(t.name)) for t in self.tensors]


def read_checkpoint(folder: str | Path) -> Checkpoint:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: a checkpoint folder needs config.json (and *.safetensors)")
    config = _json_object(config_path)
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) and a for a in archs)):
        # the rules index it: a string would be read letter by letter ("architecture Q")
        raise ValueError(f"{config_path}: 'architectures' must be a non-empty list of class names, got {archs!r}")
    if archs:
        config = text_model_config(config, config_path)  # an image-and-text checkpoint: its language model
    generation = folder / "generation_config.json"
    adapter = folder / "adapter_config.json"
    return Checkpoint(
        folder=folder,
        config=config,
        generation_config=_json_object(generation) if generation.is_file() else None,
        tokenizer=read_tokenizer(folder),
        tensors=read_tensors(folder),
        adapter_config=_json_object(adapter) if adapter.is_file() else None,
        other_weight_files=sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")),
    )


def _json_object(path: Path) -> dict:
    """The JSON object in `path`; ValueError naming the file for any other JSON value (the rules call .get)."""
    value = read_json(path)
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return value
