"""A cold start's kernels compiled ahead in worker processes (runtime/runner/compile_ahead.py).

The workers need no GPU (they compile for a target through Triton's JIT, as `mopt compile-cache build`
does), so the start, the shared compiles and the marker are tested here; tests/gpu/test_compile_ahead_gpu.py
checks that an engine start on the H200 uses them and that a second start skips them."""

from __future__ import annotations

import _thread
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.kernels.aot import AotTarget
from model_optimizer.runtime.runner import aot_workers, compile_ahead
from tests.runtime.runner.test_aot_build import _config, _entries

CONFIG = EngineConfig(max_num_seqs=2, max_model_len=256, max_num_batched_tokens=64, dtype="bfloat16")


def test_the_marker_names_the_settings_the_model_and_the_gpu(tmp_path):
    model = _config(tmp_path / "model")
    marker = compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget())
    assert marker.parent == tmp_path and marker.name.startswith("mopt-start-")
    assert compile_ahead.marker_path(tmp_path, replace(CONFIG, seed=7), model, AotTarget()) == marker  # not walked
    others = [
        compile_ahead.marker_path(tmp_path, replace(CONFIG, max_num_seqs=4), model, AotTarget()),
        compile_ahead.marker_path(tmp_path, replace(CONFIG, enforce_eager=True), model, AotTarget()),
        compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget((8, 9), 128, "NVIDIA L40S")),
    ]
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"hidden_size": 256}))
    others.append(compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()))
    assert len({marker, *others}) == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MOPT_PDL", "0"),
        ("MOPT_INT4_GLUON", "0"),
        ("MOPT_DENSE_KERNELS", "0"),
        ("MOPT_FP8_W8A8_MIN_ROWS", "1"),
        ("MOPT_INT8_W8A8_MIN_ROWS", "1"),
        ("MOPT_ATTENTION_FP8_TILES", "64,2,2"),
        ("MOPT_NORM_ROUTE_TILES", "16,16,1"),
        ("TRITON_DEFAULT_FP_FUSION", "0"),  # one of the variables Triton keys its own entries by
    ],
)
def test_a_kernel_switch_names_another_marker(tmp_path, monkeypatch, name, value):
    """A start with PDL off (or another kernel switch) compiles other kernels: a marker written with the
    switch unset does not vouch for them, and a start under it starts its workers."""
    if name.startswith("TRITON_"):
        pytest.importorskip("triton._C.libtriton")
    for switch in compile_ahead.KERNEL_SWITCHES:
        monkeypatch.delenv(switch, raising=False)
    monkeypatch.delenv(name, raising=False)
    model = _config(tmp_path / "model")
    compile_ahead.write_marker(compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()))
    monkeypatch.setenv(name, value)
    marker = compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget())
    assert not marker.exists()
    compile_ahead.write_marker(marker)
    assert compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()).exists()  # the same value: the same marker


def test_a_tile_table_counts_by_its_contents(tmp_path, monkeypatch):
    """MOPT_QUANT_TILES / MOPT_MOE_TILES name a file: rewritten in place (tuned again), it is another table."""
    model, table = _config(tmp_path / "model"), tmp_path / "tiles.json"
    for name in ("MOPT_QUANT_TILES", "MOPT_MOE_TILES"):
        table.write_text('{"gpu": "NVIDIA H200", "entries": {}}')
        monkeypatch.setenv(name, str(table))
        first = compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget())
        table.write_text('{"gpu": "NVIDIA H200", "entries": {"x": {}}}')
        assert compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()) != first
        monkeypatch.delenv(name)


def test_a_setting_no_kernel_reads_keeps_the_marker(tmp_path, monkeypatch):
    model = _config(tmp_path / "model")
    marker = compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget())
    monkeypatch.setenv("MOPT_TOKENIZER", "slow")
    monkeypatch.setenv(compile_ahead.JOBS_ENV, "4")
    assert compile_ahead.marker_path(tmp_path, CONFIG, model, AotTarget()) == marker


NOT_KERNEL_SWITCHES = {
    "MOPT_COMPILE_CACHE_DIR",  # where the cache (and the marker) lies
    "MOPT_TRITON_READ_DIRS",
    "MOPT_TRITON_CACHE_DIR_SET",
    "MOPT_AOT_PROGRESS_FILE",  # the build's progress file
}


def test_every_switch_the_kernels_and_layers_read_is_in_the_marker():
    """A new MOPT_ variable read under runtime/kernels or runtime/layers must join KERNEL_SWITCHES (or this
    list, if it changes no kernel compiled)."""
    import re

    root = Path(compile_ahead.__file__).resolve().parents[1]
    read = set()
    for source in [*root.glob("kernels/**/*.py"), *root.glob("layers/**/*.py")]:
        read |= set(re.findall(r"\bMOPT_[A-Z0-9_]+\b", source.read_text()))
    assert "MOPT_PDL" in read and "MOPT_QUANT_TILES" in read  # the scan sees the modules
    assert read - NOT_KERNEL_SWITCHES <= set(compile_ahead.KERNEL_SWITCHES), read - NOT_KERNEL_SWITCHES


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
    monkeypatch.delenv(compile_ahead.JOBS_ENV, raising=False)
    assert compile_ahead.default_jobs() == 0  # off unless asked for (README "Start-up")
    monkeypatch.setenv(compile_ahead.JOBS_ENV, "3")
    assert compile_ahead.default_jobs() == 3
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


class _Sleeps:
    """A setting that, unpickled from a worker's job, sleeps an hour: workers that run until stopped."""

    def __reduce__(self):  # noqa: ANN204
        return (time.sleep, (3600,))


HANGING = replace(CONFIG, one_shot_all_reduce=_Sleeps())  # a tensor-parallel setting: no part of the walk or marker


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not reaped
    except FileNotFoundError:
        return True


def _started(tmp_path: Path) -> compile_ahead.CompileAhead:
    ahead = compile_ahead.start(HANGING, _config(tmp_path / "model"), AotTarget(), tmp_path / "cache", jobs=2)
    assert ahead is not None and ahead.workers.claims.is_dir()
    return ahead


def _assert_stopped(ahead: compile_ahead.CompileAhead) -> None:
    assert all(p.poll() is not None for p in ahead.workers.processes)  # killed and reaped
    assert not ahead.workers.claims.exists()


def test_a_start_failing_before_its_join_stops_the_workers(tmp_path):
    ahead = _started(tmp_path)
    try:
        with pytest.raises(ValueError, match="max_model_len"), compile_ahead.stopped_on_error(ahead):
            raise ValueError("max_model_len 9999 exceeds the model's max_position_embeddings")
        _assert_stopped(ahead)
    finally:
        for process in ahead.workers.processes:
            process.kill()


def test_an_interrupted_join_stops_the_workers(tmp_path):
    """Ctrl-C while the start waits for its workers: they are killed and reaped, their folder removed."""
    ahead = _started(tmp_path)
    main = threading.main_thread().ident

    def interrupt_inside_the_wait() -> None:
        while True:  # once the main thread waits in Workers.wait (not before: the interrupt must land there)
            frame = sys._current_frames().get(main)
            while frame is not None and frame.f_code is not aot_workers.Workers.wait.__code__:
                frame = frame.f_back
            if frame is not None:
                _thread.interrupt_main()
                return
            time.sleep(0.01)

    interrupter = threading.Thread(target=interrupt_inside_the_wait, daemon=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            interrupter.start()
            ahead.join(timeout=600)
        _assert_stopped(ahead)
    finally:
        for process in ahead.workers.processes:
            process.kill()


PARENT = """
import sys, time
from pathlib import Path
from model_optimizer.runtime.kernels.aot import AotTarget
from model_optimizer.runtime.runner import aot_workers, compile_ahead
from tests.runtime.runner.test_compile_ahead import HANGING
ahead = compile_ahead.start(HANGING, Path(sys.argv[1]), AotTarget(), Path(sys.argv[2]), jobs=2)
print(ahead.workers.claims, *(p.pid for p in ahead.workers.processes), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_the_engine_process_is_killed(tmp_path):
    """The engine core killed mid-start (SIGKILL: no finally runs): its workers notice and end, and
    remove their claims folder, instead of building on for no one."""
    model = _config(tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(model), str(tmp_path / "cache")], env=env, stdout=subprocess.PIPE, text=True
    )
    claims, *pids = parent.stdout.readline().split()
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 120  # a bound against hangs: they notice within a second of their start-up
    while not all(_gone(int(pid)) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert all(_gone(int(pid)) for pid in pids)
        assert not Path(claims).exists()
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_workers_that_cannot_start_leave_the_start_to_compile_alone(tmp_path, monkeypatch, caplog):
    """No interpreter to run them (an embedding host's sys.executable): the start goes on without them,
    and leaves no claims folder behind."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    model = _config(tmp_path / "model")
    with caplog.at_level(logging.WARNING, logger=compile_ahead.__name__):
        assert compile_ahead.start(CONFIG, model, AotTarget(), tmp_path / "cache", jobs=2) is None
    assert "no compile-ahead workers" in caplog.text and not list((tmp_path / "tmp").iterdir())
