"""benchmarks/fixed_launch_default.py ranks the launches a sweep timed on every shape of a bucket against
cuBLAS's, shape by shape: the committed H200 int8 sweep, and a small sweep written here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from fixed_launch_default import compare  # noqa: E402


def _row(kernel: str, linear: str, us: float, block_m: int = 128, m: int = 128) -> dict:
    tiles = {"block_m": block_m, "block_n": 64, "block_k": 128, "num_warps": 4, "num_stages": 3}
    return {"kind": "int8", "m": m, "kernel": kernel, "model": "tiny", "linear": linear, "ms": us / 1000,
            "tiles": tiles}  # fmt: skip


def test_launches_ranked_by_total_with_wins_and_worst_shape():
    sweep = [
        _row("int_mm", "qkv", 10), _row("int_mm", "down", 20),
        _row("w8a8", "qkv", 12), _row("w8a8", "down", 14),  # 26 in all: faster on down only
        _row("w8a8", "qkv", 9, block_m=64), _row("w8a8", "down", 25, block_m=64),  # 34
        _row("w8a8", "qkv", 5, block_m=32),  # not timed on down: left out
        _row("dequant", "qkv", 1), _row("dequant", "down", 1),  # no graph can take it: left out
        _row("int_mm", "qkv", 3, m=256),  # another bucket
    ]  # fmt: skip
    result = compare(sweep, "int8", "int_mm", 128, top=5)
    assert result["baseline"]["total_us"] == 30 and result["shapes"] == ["tiny down", "tiny qkv"]
    first, second = result["launches"]
    assert (first["launch"], first["total_us"], first["wins"]) == ("w8a8 128x64x128 w4 s3", 26, 1)
    assert (first["worst_shape"], first["worst_ratio"]) == ("tiny qkv", 1.2)
    assert (second["total_us"], second["wins"], second["worst_shape"]) == (34, 1, "tiny down")


def test_the_committed_int8_sweep(tmp_path):
    """The H200's int8 sweep: at 128 rows one launch of our W8A8 program beats _int_mm in total, not on
    every shape (the README's reason for keeping _int_mm as the default)."""
    out = tmp_path / "int8.json"
    sweep = BENCHMARKS / "results" / "kernels_h200" / "int8_w8a8" / "quant_kernels_int8.json.gz"
    subprocess.run([sys.executable, str(BENCHMARKS / "fixed_launch_default.py"), str(sweep), "--kind", "int8",
                    "--baseline", "int_mm", "--output", str(out)], check=True, capture_output=True)  # fmt: skip
    buckets = json.loads(out.read_text())["buckets"]
    assert [b["bucket"] for b in buckets] == [128, 256] and all(len(b["shapes"]) == 8 for b in buckets)
    best = buckets[0]["launches"][0]
    assert best["total_us"] < buckets[0]["baseline"]["total_us"] and 0 < best["wins"] < 8
