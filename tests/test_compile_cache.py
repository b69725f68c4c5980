"""Compile caches in a folder we own, keyed by versions and GPU; enforce_eager compiles nothing.

Checked on the CPU through the environment an engine leaves behind: the variables Triton and torch
inductor read, set only where the user had not set them, and MOPT_NO_COMPILE under enforce_eager
(tests/gpu/test_perf_gpu.py checks on CUDA that the caches fill and torch._inductor stays unloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from model_optimizer import compile_cache
from model_optimizer.compile_cache import cache_key, cache_root, configure_compile
from model_optimizer.layers.fusion import compiling
from tests.server.test_process import REPO


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in (*compile_cache.CACHE_VARIABLES, compile_cache.NO_COMPILE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "root"))
    monkeypatch.setattr(compile_cache, "_set_no_compile", False)
    return tmp_path / "root"


def test_key_names_versions_and_gpu_and_differs_when_one_changes(monkeypatch):
    h200 = cache_key("NVIDIA H200")
    assert h200.startswith("torch-") and "triton-" in h200 and "mopt-" in h200 and "NVIDIA-H200" in h200
    assert "/" not in h200 and " " not in h200
    assert cache_key("NVIDIA H100 80GB HBM3") != h200 and "_cpu-" in cache_key(None)
    monkeypatch.setattr(compile_cache, "_version", lambda package: "9.9" if package == "triton" else "1.0")
    assert cache_key("NVIDIA H200") != h200  # a new Triton never reads the old entries


def test_root_follows_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"
    monkeypatch.delenv(compile_cache.CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "model-optimizer" / "compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == compile_cache.Path.home() / ".cache" / "model-optimizer" / "compile"


def test_unset_variables_point_into_our_folder_and_the_users_win(clean_env, monkeypatch):
    chosen = configure_compile(SimpleNamespace(device="cpu", enforce_eager=False))
    assert set(chosen) == {"TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"}
    assert os.environ["TRITON_CACHE_DIR"].startswith(str(clean_env / cache_key(None)))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/users/own/inductor")
    monkeypatch.delenv("TRITON_CACHE_DIR")
    assert set(configure_compile(SimpleNamespace(device="cpu", enforce_eager=False))) == {"TRITON_CACHE_DIR"}
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/users/own/inductor"


def test_enforce_eager_switches_fusion_off_and_a_later_engine_back_on(clean_env, monkeypatch):
    assert compiling()
    configure_compile(SimpleNamespace(device="cpu", enforce_eager=True))
    assert not compiling()
    configure_compile(SimpleNamespace(device="cpu", enforce_eager=False))
    assert compiling()
    monkeypatch.setenv(compile_cache.NO_COMPILE_ENV, "1")  # the user's own switch is never undone
    configure_compile(SimpleNamespace(device="cpu", enforce_eager=False))
    assert not compiling()


def test_engine_start_sets_the_caches_and_never_loads_inductor_or_transformers(tiny_model, tmp_path):
    probe = (
        "import json, os, sys\nfrom model_optimizer.llm import LLM\n"
        f"LLM({str(tiny_model('qwen3'))!r}, max_model_len=128, num_kv_blocks=16, enforce_eager=True)\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR',"
        " 'MOPT_NO_COMPILE')} | {'loaded': sorted(m for m in ('torch._inductor', 'transformers') if m in sys.modules)}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in compile_cache.CACHE_VARIABLES}
    env.update({compile_cache.CACHE_DIR_ENV: str(tmp_path), "PYTHONPATH": str(REPO)})
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["TRITON_CACHE_DIR"].startswith(str(tmp_path)) and seen["TORCHINDUCTOR_CACHE_DIR"].startswith(
        str(tmp_path)
    )
    assert seen["MOPT_NO_COMPILE"] == "1"
    assert seen["loaded"] == []
