"""benchmarks/warm_ab_summary.py reads a warm-start A/B's lines into per-start phases and per-tree medians,
counting only the alternated starts (not the cold one nor the bytecode-filling ones)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from warm_ab_summary import parse  # noqa: E402

SUMMARY = """\
cold ready_s 24.55 imports 6.42 s,kv sizing 4.27 s,process before listening 24.46 s,
fill_old ready_s 5.27 imports 1.60 s,kv sizing 0.82 s,process before listening 5.19 s,
old_1 ready_s 4.30 imports 1.43 s,kv sizing 0.67 s,process before listening 4.20 s,
new_1 ready_s 3.58 imports 1.44 s,kv sizing 0.29 s,process before listening 3.50 s,
old_2 ready_s 5.44 imports 1.97 s,kv sizing 0.85 s,process before listening 5.35 s,
new_2 ready_s 3.44 imports 1.40 s,kv sizing 0.27 s,process before listening 3.36 s,
old_3 ready_s 4.49 imports 1.36 s,kv sizing 0.78 s,process before listening 4.40 s,
old: /ready median 4.49 s over 3 warm starts: [4.3, 5.44, 4.49]
"""


def test_medians_count_only_the_alternated_starts():
    result = parse(SUMMARY)
    assert [s["start"] for s in result["starts"]][:2] == ["cold", "fill_old"] and len(result["starts"]) == 7
    assert result["starts"][0]["phases"] == {"imports": 6.42, "kv sizing": 4.27, "process before listening": 24.46}
    old, new = result["median"]["old"], result["median"]["new"]
    assert (old["starts"], old["ready_s"], old["phases"]["kv sizing"]) == (3, 4.49, 0.78)
    assert (new["starts"], new["ready_s"], new["phases"]["imports"]) == (2, 3.51, 1.42)


def test_the_script_writes_summary_json(tmp_path):
    (tmp_path / "summary.txt").write_text(SUMMARY)
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "warm_ab_summary.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "old: /ready median 4.49 s over 3 starts" in out.stdout
    assert json.loads((tmp_path / "summary.json").read_text())["median"]["new"]["ready_s"] == 3.51
