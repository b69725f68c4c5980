"""Property-based fuzzing of every operation in /openapi.json (positive and negative cases): no 5xx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.server.live import metric

REPO = Path(__file__).resolve().parents[2]
MIN_CASES = 300


def test_schemathesis_finds_no_server_errors(server, tmp_path, monkeypatch):
    monkeypatch.setattr(server.state.config, "max_tokens_limit", 4)  # keep the generated generations short
    st = Path(sys.executable).with_name("st")
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.server.st_hooks",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    report = tmp_path / "run.json"
    cmd = [str(st), "run", server.url + "/openapi.json", "--checks", "not_a_server_error", "--mode", "all",
           "--max-examples", "5", "--seed", "20261129", "--phases", "examples,coverage,fuzzing", "--no-shrink",
           "--workers", "1", "--request-timeout", "60", "--report", "json", "--report-json-path", str(report)]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    summary = json.loads(report.read_text())
    assert summary["failures"] == [], run.stdout[-4000:]
    assert summary["errors"] == [], run.stdout[-4000:]
    print(f"\nschemathesis: {summary['test_cases']} in {summary['running_time']:.0f} s")
    assert summary["test_cases"]["generated"] >= MIN_CASES
    assert run.returncode == 0, run.stdout[-4000:]
    text = httpx.get(server.url + "/metrics").text  # the server is still healthy and idle afterwards
    assert httpx.get(server.url + "/health").status_code == 200
    assert metric(text, "vllm:num_requests_running") >= 0
