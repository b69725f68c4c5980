"""Tiny checkpoints whose every linear input size is a multiple of 128, so int4 groups tile them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import tiny_checkpoints as tiny

QUANT_MODELS = {
    "qwen3": (
        "qwen3",
        dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    ),
    # qkv biases exercise bias slicing of fused shards
    "qwen2": ("qwen2", dict(hidden_size=128, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2)),
}


@pytest.fixture(scope="session")
def quant_model(tmp_path_factory):
    """Factory: quant_model(name) -> folder of a float32 tiny checkpoint with a tokenizer."""
    import transformers

    root = tmp_path_factory.mktemp("quant_models")
    built: dict[str, Path] = {}

    def make(name: str = "qwen3") -> Path:
        if name not in built:
            kind, overrides = QUANT_MODELS[name]
            cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[kind]
            config = cls(
                vocab_size=tiny.TOKENIZER_VOCAB + 8,
                num_hidden_layers=2,
                max_position_embeddings=512,
                tie_word_embeddings=True,
                eos_token_id=2,
                pad_token_id=0,
                **overrides,
            )
            out = root / name
            tiny.build_checkpoint(out, config, seed=3, with_tokenizer=False)
            tok = root / "tokenizer"
            if not tok.is_dir():
                tiny.build_tokenizer(tok)
            for f in tok.iterdir():
                shutil.copy(f, out / f.name)
            built[name] = out
        return built[name]

    return make
