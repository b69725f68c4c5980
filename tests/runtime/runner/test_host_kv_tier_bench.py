"""benchmarks/host_kv_tier.py --smoke on the CPU: the script runs its three paths and its counters show
that each took the path it times (the host hit really loaded the whole prefix from host memory). A smoke
test: it asserts what ran, never how fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_smoke_run_takes_each_path_it_times(tmp_path):
    out = tmp_path / "host_kv_tier.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "host_kv_tier.py"), "--smoke", "--output", str(out)]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    run = subprocess.run(cmd, cwd=REPO / "benchmarks", capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    prefix_len = result["workload"]["prefix_len"]
    assert len(result["runs"]) == result["workload"]["repeats"] == 2
    for row in result["runs"]:
        assert (row["recompute"]["prefix_cache_hits"], row["recompute"]["host_kv_hits"]) == (0, 0)
        assert (row["gpu_hit"]["prefix_cache_hits"], row["gpu_hit"]["host_kv_hits"]) == (prefix_len, 0)
        assert row["host_hit"]["host_kv_hits"] == row["host_hit"]["prefix_cache_hits"] == prefix_len
        assert row["host_hit"]["num_cached_tokens"] == prefix_len
    assert result["all_paths_ok"] and result["num_host_kv_blocks"] > 0
    assert result["num_kv_blocks"] * 16 < 2 * prefix_len  # the pool holds less than the prefix and a filler
    assert set(result["ttft_ms_median"]) == {"recompute", "gpu_hit", "host_hit"}
