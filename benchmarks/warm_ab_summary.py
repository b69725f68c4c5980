"""The JSON of a start-up A/B (scripts/device/warm_ab_h200.sh, compile_jobs_h200.sh): each start's /ready
seconds and the core's start-up phases, read from the script's summary.txt, and per side the median of
its alternated starts (`NAME_N`: old_1, new_2, jobs8_1; the cold start and the bytecode-filling starts
are listed, not counted).

    python benchmarks/warm_ab_summary.py RESULTS_FOLDER   # writes RESULTS_FOLDER/summary.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from model_optimizer.common.fileio import atomic_write

PHASE = re.compile(r"([a-z][a-z -]*?) ([0-9.]+) s")


def parse(summary: str) -> dict:
    starts = []
    for line in summary.splitlines():
        fields = line.split(maxsplit=3)
        if len(fields) < 3 or fields[1] != "ready_s":
            continue
        phases = {name.strip(): float(s) for name, s in PHASE.findall(fields[3] if len(fields) > 3 else "")}
        starts.append({"start": fields[0], "ready_s": float(fields[2]), "phases": phases})
    trees: dict[str, list[dict]] = {}
    for start in starts:
        tree, _, index = start["start"].rpartition("_")
        if tree and index.isdigit():  # old_1, new_2, jobs8_1 ...: the alternated starts
            trees.setdefault(tree, []).append(start)
    medians = {
        tree: {
            "ready_s": statistics.median(s["ready_s"] for s in runs),
            "phases": {
                name: statistics.median(s["phases"][name] for s in runs if name in s["phases"])
                for name in runs[0]["phases"]
            },
            "starts": len(runs),
        }
        for tree, runs in trees.items()
    }
    return {"starts": starts, "median": medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    result = parse((folder / "summary.txt").read_text())
    atomic_write(folder / "summary.json", json.dumps(result, indent=1) + "\n")
    for tree, m in result["median"].items():
        print(
            f"{tree}: /ready median {m['ready_s']:.2f} s over {m['starts']} starts; "
            + ", ".join(f"{k} {v:.2f}" for k, v in m["phases"].items())
        )


if __name__ == "__main__":
    main()
