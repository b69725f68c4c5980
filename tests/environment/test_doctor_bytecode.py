"""The doctor's bytecode check: a large package whose bytecode is not cached and cannot be written makes
every process compile it again (the H200 test image: `import torch` 8.3 s without, 1.8 s with it kept)."""

from __future__ import annotations

import copy
import importlib.util
import py_compile

import doctor_edits as E

from model_optimizer.environment import evaluate
from model_optimizer.environment.probes.software import bytecode_state, probe_bytecode


def _package(tmp_path):
    source = tmp_path / "pkg" / "__init__.py"
    source.parent.mkdir()
    source.write_text("VALUE = 1\n")
    return str(source)


def test_state_sees_the_cache_python_would_read(tmp_path):
    source = _package(tmp_path)
    state = bytecode_state(source)
    assert state == {"source": source, "cached": False, "writable": True}  # no __pycache__ yet: its parent counts
    py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)
    assert bytecode_state(source)["cached"] is True


def test_the_live_probe_finds_torch_without_importing_it():
    data = probe_bytecode()
    assert data["packages"]["torch"]["source"].endswith("torch/__init__.py")
    assert set(data) == {"packages", "dont_write_bytecode", "pycache_prefix"}


def _with_bytecode(packages, dont_write):
    snap = copy.deepcopy(E.load(E.CPU_SNAPSHOT))
    snap["probes"]["bytecode"] = {
        "ok": True,
        "data": {"packages": packages, "dont_write_bytecode": dont_write, "pycache_prefix": None},
        "elapsed_s": 0.0,
    }
    return {f.id: f for f in evaluate(snap)}


TORCH = "/opt/venv/lib/python3.12/site-packages/torch/__init__.py"


def test_uncached_torch_with_writing_off_is_a_warning_with_both_fixes():
    found = _with_bytecode({"torch": {"source": TORCH, "cached": False, "writable": True}}, dont_write=True)
    f = found["python.bytecode"]
    assert f.severity == "warn" and "torch" in f.title and "PYTHONDONTWRITEBYTECODE" in f.why
    fixes = f.fix_for("debian")
    assert fixes[0].startswith("python -m compileall -q -j 0 /opt/venv/lib/python3.12/site-packages/torch ")
    assert "PYTHONPYCACHEPREFIX" in fixes[1] and "unset PYTHONDONTWRITEBYTECODE" in fixes[1]


def test_a_read_only_install_is_a_warning_too():
    found = _with_bytecode({"torch": {"source": TORCH, "cached": False, "writable": False}}, dont_write=False)
    assert "read-only" in found["python.bytecode"].why
    assert "unset" not in found["python.bytecode"].fix_for("any")[1]


def test_no_warning_when_the_bytecode_is_there_or_the_first_start_writes_it():
    assert "python.bytecode" not in _with_bytecode(
        {"torch": {"source": TORCH, "cached": True, "writable": False}}, True
    )
    assert "python.bytecode" not in _with_bytecode(
        {"torch": {"source": TORCH, "cached": False, "writable": True}}, False
    )
    assert "python.bytecode" not in {f.id for f in evaluate(E.load(E.CPU_SNAPSHOT))}  # snapshots from before the probe
