"""Everything `mopt inspect` reads from a checkpoint folder, read once: the JSON files, the
tokenizer facts and the safetensors headers. No tensor data, no transformers, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.common.fileio import read_json
from model_optimizer.model.inspect.headers import TensorInfo, read_tensors
from model_optimizer.model.inspect.leftovers import KeyClass, classify
from model_optimizer.model.inspect.tokenizer_files import TokenizerFacts, read_tokenizer


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
    config = read_json(config_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} must hold a JSON object")
    generation = folder / "generation_config.json"
    adapter = folder / "adapter_config.json"
    return Checkpoint(
        folder=folder,
        config=config,
        generation_config=read_json(generation) if generation.is_file() else None,
        tokenizer=read_tokenizer(folder),
        tensors=read_tensors(folder),
        adapter_config=read_json(adapter) if adapter.is_file() else None,
        other_weight_files=sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")),
    )
