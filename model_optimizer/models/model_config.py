"""Read a checkpoint's config.json into the few numbers a decoder needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from model_optimizer.fileio import read_json


@dataclass
class DecoderArgs:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    sliding_window: int | None
    torch_dtype: str
    hf: dict
    """The raw config.json, for model-specific keys (rope parameters and the like)."""

    @classmethod
    def from_dict(cls, hf: dict) -> DecoderArgs:
        archs = hf.get("architectures") or []
        if not archs:
            raise ValueError("config.json has no 'architectures' list; cannot tell which model this is")
        num_heads = hf["num_attention_heads"]
        hidden = hf["hidden_size"]
        use_window = hf.get("use_sliding_window", True) and hf.get("sliding_window")
        return cls(
            architecture=archs[0],
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hidden // num_heads,
            intermediate_size=hf["intermediate_size"],
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            attention_bias=hf.get("attention_bias", False),
            sliding_window=int(use_window) if use_window else None,
            torch_dtype=str(hf.get("torch_dtype") or hf.get("dtype") or "float32"),
            hf=hf,
        )


def read_config(model_dir: str | Path) -> dict:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a model folder needs config.json (and *.safetensors)")
    return read_json(path)
