"""Header reading agrees with safetensors' own reader, on single and sharded checkpoints, and needs
no tensor data: a file cut right after its header reads the same."""

from __future__ import annotations

import os

import pytest
from safetensors import safe_open

from model_optimizer.model.inspect.headers import checkpoint_files, read_header, read_tensors


def _reference(folder):
    out = {}
    for path in checkpoint_files(folder):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                s = f.get_slice(name)
                out[name] = (s.get_dtype(), tuple(s.get_shape()), path.name)
    return out


def test_sharded_headers_match_safetensors(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(str(tiny_model("llama3"))).save_pretrained(str(sharded), max_shard_size="50KB")
    files = checkpoint_files(sharded)
    assert len(files) > 1
    ours = {t.name: (t.dtype, t.shape, t.file) for t in read_tensors(sharded)}
    assert ours == _reference(sharded)


def test_only_the_header_is_read(tiny_model, tmp_path):
    src = tiny_model("qwen3") / "model.safetensors"
    with src.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        head = f.read(length)
    cut = tmp_path / "model.safetensors"
    with cut.open("wb") as f:
        f.write(length.to_bytes(8, "little") + head)
        f.truncate(os.path.getsize(src))  # a hole where the data was: sparse, nothing written
    assert read_header(cut)[0] == read_header(src)[0]


def test_header_length_past_the_file_is_an_error(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes((10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        read_header(path)


def test_index_naming_a_missing_shard_is_an_error(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-00001-of-00002.safetensors"}}')
    with pytest.raises(FileNotFoundError, match="missing"):
        checkpoint_files(tmp_path)
