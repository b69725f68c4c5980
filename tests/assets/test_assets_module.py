"""model_optimizer.assets.reference_model_path: the folder, or a clear error without weights."""

from __future__ import annotations

import pytest

import model_optimizer.assets as assets


def test_missing_weights_give_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(assets, "REFERENCE_MODEL_DIR", tmp_path / "pydoc-qwen3")
    with pytest.raises(ValueError, match="install_reference_model.py"):
        assets.reference_model_path()


def test_installed_weights_are_found(monkeypatch, tmp_path):
    folder = tmp_path / "pydoc-qwen3"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(assets, "REFERENCE_MODEL_DIR", folder)
    assert assets.reference_model_path() == folder
