"""Fixtures for inspect tests: a fresh copy of a tiny checkpoint per test, to break at will."""

from __future__ import annotations

import pytest

from tests.model.inspect.broken import copy_model


@pytest.fixture
def fresh(tiny_model, tmp_path):
    """fresh(name='qwen3') -> a private copy of the tiny checkpoint `name` (see tests/conftest.py)."""

    def make(name: str = "qwen3"):
        return copy_model(tiny_model(name), tmp_path / name)

    return make
