"""Record `mopt doctor` on a GPU machine, for the test fixtures and the README's figures.

Run on the GPU machine, from the repository root:

    PYTHONPATH=. python3 scripts/device/doctor_capture.py

Needs torch with CUDA, nvidia-ml-py (pynvml) and rich, all in the H200 image. Takes about
30-60 s (probes ~5 s twice, microbenchmarks ~15-30 s). Writes into $OUT (default ./out):

    h200_snapshot.json   every probe's raw result, taken with the GPU idle: NVML dump,
                         `nvidia-smi -q -x` XML, /proc/driver/nvidia/*, /proc/modules, /dev/nvidia*,
                         PCI sysfs, torch, packages  -> commit as tests/environment/fixtures/h200_snapshot.json
    doctor_h200.json     the JSON that `mopt doctor --bench --json` prints (findings, recommended
                         settings, benchmark figures)  -> commit as benchmarks/results/doctor_h200.json
    doctor_h200.txt      the human-readable report of the same snapshot, for reading
    capture_log.txt      exit codes and timings of this script

The snapshot is taken before the benchmarks so its clocks, power and memory are at rest."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())

from model_optimizer.cli.doctor import main as doctor_main  # noqa: E402
from model_optimizer.environment import capture_snapshot  # noqa: E402
from model_optimizer.environment.snapshot import write_json_atomic  # noqa: E402


def _run_doctor(argv: list[str]) -> tuple[int, str]:
    """Call `mopt doctor` in-process and return (exit code, what it printed)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = doctor_main(argv)
    return code, buf.getvalue()


def main() -> int:
    out = os.environ.get("OUT") or "out"
    os.makedirs(out, exist_ok=True)
    log = []
    t0 = time.monotonic()
    snapshot = capture_snapshot()
    snap_path = os.path.join(out, "h200_snapshot.json")
    write_json_atomic(snap_path, snapshot)
    log.append(
        f"snapshot: {time.monotonic() - t0:.1f} s, probes ok: "
        + ", ".join(f"{k}={v['ok']}" for k, v in snapshot["probes"].items())
    )

    t1 = time.monotonic()
    code, text = _run_doctor(["--snapshot", snap_path, "--os", "all"])
    with open(os.path.join(out, "doctor_h200.txt"), "w", encoding="utf-8") as fh:
        fh.write(text)
    log.append(f"report of the snapshot: exit code {code}, {time.monotonic() - t1:.1f} s")

    t2 = time.monotonic()
    code, text = _run_doctor(["--bench", "--json"])
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = {"error": "mopt doctor --bench --json did not print JSON", "output": text[-5000:]}
    write_json_atomic(os.path.join(out, "doctor_h200.json"), doc)
    log.append(f"mopt doctor --bench --json: exit code {code}, {time.monotonic() - t2:.1f} s")
    for r in (doc.get("bench") or {}).get("results", []):
        log.append(
            f"  {r.get('label')}: {r.get('value')} {r.get('unit')} ({r.get('pct_of_reference')}% of {r.get('reference')}) {r.get('error') or ''}"
        )
    with open(os.path.join(out, "capture_log.txt"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(log) + "\n")
    print("\n".join(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
