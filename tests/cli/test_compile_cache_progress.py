"""`mopt compile-cache build` shows its progress while it compiles (tens of seconds for a real model): one
step per kernel variant compiled, out of the variants the build compiles. Here stderr is a pipe, so the
steps are plain lines (common.progress); the build runs in a subprocess without TRITON_INTERPRET, as in
tests/runtime/runner/test_aot_build.py, whose tiny model and flags it uses."""

from __future__ import annotations

import json
import re

import pytest

from tests.runtime.runner.test_aot_build import FLAGS, _config, _mopt

STEP = re.compile(r"^mopt compile-cache: (\d+)/(\d+) kernel variants done$", re.MULTILINE)


@pytest.mark.slow
def test_a_build_reports_the_kernel_variants_as_they_compile(tmp_path):
    """Two worker processes compile: the steps they make reach the progress in this one."""
    pytest.importorskip("triton.backends.compiler")
    model, out = _config(tmp_path / "model"), tmp_path / "cache"
    result = _mopt("build", "--model", str(model), *FLAGS, "--output", str(out), "--jobs", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    compiled = json.loads((out / "aot_manifest.json").read_text())["compiled"]
    steps = [(int(done), int(total)) for done, total in STEP.findall(result.stderr)]
    assert compiled > 0 and {total for _, total in steps} == {compiled}, result.stderr[-3000:]
    done = [count for count, _ in steps]
    assert done[0] >= 1 and done == sorted(done) and done[-1] == compiled
