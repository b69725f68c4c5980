"""A cold start's kernels compiled ahead in worker processes (runtime/runner/compile_ahead.py).

The workers need no GPU (they compile for a target through Triton's JIT, as `mopt compile-cache build`
does), so the start, the shared compiles and the marker are tested here; tests/gpu/test_compile_ahead_gpu.py
checks that an engine start on the H200 uses them and that a second start skips them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.kernels.aot import AotTarget
from model_optimizer.runtime.runner import compile_ahead
from tests.runtime.runner.test_aot_build import _config, _entries

CONFIG = EngineConfig(max_num_seqs=2, max_model_len=256, max_num_batched_tokens=64, dtype="bfloat16")


def test_the_marker_names_the_settings_the_model_and_the_gpu(tmp_path):
    model = _config(tmp_path / "model")
    marker = compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget())
    assert marker.parent == tmp_path and marker.name.startswith("mopt-start-")
    assert compile_ahead.marker_path(tmp_path, replace(CONFIG, seed=7), model, AotTarget()) == marker  # not walked
    others = [
        compile_ahead.marker_path(tmp_path, replace(CONFIG, max_num_seqs=4), model, AotTarget()),
        compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget((8, 9), 128, "NVIDIA L40S")),
    ]
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"hidden_size": 256}))
    others.append(compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()))
    assert len({marker, *others}) == 4


def test_no_workers_when_off_split_or_already_compiled(tmp_path, monkeypatch):
    model = _config(tmp_path / "model")
    assert compile_ahead.start(CONFIG, model, AotTarget(), tmp_path / "cache", jobs=0) is None
    assert compile_ahead.start(replace(CONFIG, tensor_parallel_size=2), model, AotTarget(), tmp_path, jobs=2) is None
    compile_ahead.write_marker(compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()))
    assert compile_ahead.start(CONFIG, model, AotTarget(), tmp_path, jobs=2) is None
    monkeypatch.setenv(compile_ahead.JOBS_ENV, "0")
    assert compile_ahead.default_jobs() == 0
    monkeypatch.setenv(compile_ahead.JOBS_ENV, "many")
    with pytest.raises(ValueError, match="MOPT_COMPILE_JOBS must be a whole number"):
        compile_ahead.default_jobs()


@pytest.mark.slow
def test_workers_fill_the_cache_and_the_next_start_needs_none(tmp_path, monkeypatch):
    pytest.importorskip("triton.backends.compiler")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the spawned workers compile with Triton's JIT
    model, cache = _config(tmp_path / "model"), tmp_path / "cache"
    ahead = compile_ahead.start(CONFIG, model, AotTarget(), cache, jobs=2)
    assert ahead is not None and len(ahead.processes) == 2
    ahead.join()
    assert all(p.exitcode == 0 for p in ahead.processes) and not ahead.claims.exists()
    assert _entries(cache) and list(cache.glob("*/*.cubin"))  # compiled for sm_90, not interpreted
    assert not ahead.marker.exists()  # written by the start once its graphs are captured
    ahead.done()
    assert compile_ahead.start(CONFIG, model, AotTarget(), cache, jobs=2) is None
