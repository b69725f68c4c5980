"""EmbedConfig and EngineConfig share four fields: same choices and defaults, carried over in one place."""

from __future__ import annotations

import dataclasses

import pytest

from model_optimizer.runtime.config import EngineConfig, field_choices
from model_optimizer.runtime.embed.config import SHARED_FIELDS, EmbedConfig


def _defaults(cls: type) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("name", SHARED_FIELDS)
def test_shared_fields_have_the_engines_choices_and_defaults(name):
    assert field_choices(EmbedConfig, name) == field_choices(EngineConfig, name)
    assert _defaults(EmbedConfig)[name] == _defaults(EngineConfig)[name]


def test_from_engine_carries_the_shared_fields_and_takes_embedding_ones():
    engine = EngineConfig(tokenizer="/tok", dtype="float16", load_format="dummy", device="cpu", max_num_seqs=3)
    config = EmbedConfig.from_engine(engine, pooling="cls", device="cuda")
    assert (config.tokenizer, config.dtype, config.load_format) == ("/tok", "float16", "dummy")
    assert config.device == "cuda" and config.pooling == "cls"  # a field given here wins over the engine's
    assert config.max_num_seqs == EmbedConfig().max_num_seqs  # not a shared field: the embedder's own default


def test_from_engine_still_validates():
    with pytest.raises(ValueError, match="max_num_seqs"):
        EmbedConfig.from_engine(EngineConfig(), max_num_seqs=0)
