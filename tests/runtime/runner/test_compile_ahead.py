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


def test_a_failed_worker_is_reported_with_its_output(tmp_path):
    """A model folder whose config cannot be built: both workers fail, the start is told why."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["NoSuchForCausalLM"]}))
    ahead = compile_ahead.start(CONFIG, model, AotTarget(), tmp_path / "cache", jobs=2)
    finished = ahead.join()
    assert finished.failed == 2 and not finished.reports and "NoSuchForCausalLM" in finished.errors


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
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")  # the workers find the package all the same
    model, cache = _config(tmp_path / "model"), tmp_path / "cache"
    ahead = compile_ahead.start(CONFIG, model, AotTarget(), cache, jobs=2)
    assert ahead is not None and len(ahead.workers.processes) == 2
    finished = ahead.join()
    assert (finished.late, finished.failed, len(finished.reports)) == (0, 0, 2), finished.errors
    assert sum(r["compiled"] for r in finished.reports) > 0 and not ahead.workers.claims.exists()
    assert _entries(cache) and list(cache.glob("*/*.cubin"))  # compiled for sm_90, not interpreted
    assert not ahead.marker.exists()  # written by the start once its graphs are captured
    ahead.done()
    assert compile_ahead.start(CONFIG, model, AotTarget(), cache, jobs=2) is None
