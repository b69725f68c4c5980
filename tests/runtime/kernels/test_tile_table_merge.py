"""benchmarks/quant_kernels.py's merge of a new sweep into the packaged tile table."""

import importlib
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture
def quant_kernels(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their siblings by name
    return importlib.import_module("quant_kernels")


def _entry(block_m: int) -> dict:
    return {"block_m": block_m, "block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 3,
            "backend": "triton"}  # fmt: skip


def test_a_sweep_merged_keeps_the_old_entries_and_the_also_list(tmp_path, quant_kernels):
    path = tmp_path / "quant_tiles.json"
    also = {"NVIDIA H100 80GB HBM3": ["int4"]}
    old = {"gpu": "NVIDIA H200", "also": also, "version": 2, "entries": {"int4:64:64:256": _entry(64)}}
    path.write_text(json.dumps(old))
    new = {"gpu": "NVIDIA H200", "version": 2, "entries": {"int4:128:64:256": _entry(128)}}
    quant_kernels.merge_tables(path, new)
    merged = json.loads(path.read_text())
    assert merged["also"] == also
    assert sorted(merged["entries"]) == ["int4:128:64:256", "int4:64:64:256"]
    with pytest.raises(ValueError, match="the sweep ran on NVIDIA H100"):
        quant_kernels.merge_tables(path, new | {"gpu": "NVIDIA H100 80GB HBM3"})
