"""Triton's cache in a folder we own, keyed by versions and GPU; no torch.compile on the way to a running engine.

Checked on the CPU through the environment an engine leaves behind: the variable Triton reads, set
only where the user had not set it, and which modules an engine start loaded (tests/gpu/test_perf_gpu.py
checks on CUDA that the cache fills and torch._inductor stays unloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from model_optimizer.runtime import cuda_context
from model_optimizer.runtime.kernels import compile_cache
from model_optimizer.runtime.kernels.compile_cache import cache_key, cache_root, configure_compile
from tests.runtime.server.test_process import REPO


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in (*compile_cache.CACHE_VARIABLES, "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TRITON_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "root"))
    return tmp_path / "root"


def test_key_names_versions_and_architecture_and_differs_when_one_changes(monkeypatch):
    hopper = cache_key("sm90")
    assert hopper.startswith("torch-") and "triton-" in hopper and "mopt-" in hopper and "_sm90-" in hopper
    assert "/" not in hopper and " " not in hopper
    assert cache_key("sm89") != hopper and "_cpu-" in cache_key(None)
    monkeypatch.setattr(compile_cache, "_version", lambda package: "9.9" if package == "triton" else "1.0")
    assert cache_key("sm90") != hopper  # a new Triton never reads the old entries


def test_root_follows_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"
    monkeypatch.delenv(compile_cache.CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "model-optimizer" / "compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == compile_cache.Path.home() / ".cache" / "model-optimizer" / "compile"


def test_unset_variable_points_into_our_folder_and_the_users_wins(clean_env, monkeypatch):
    chosen = configure_compile(SimpleNamespace(device="cpu", enforce_eager=False))
    folder = str(clean_env / cache_key(None) / "triton")
    assert chosen == {
        "TRITON_CACHE_DIR": folder,
        compile_cache.TRITON_MANAGER_ENV: compile_cache.MANAGER,  # entries found where they lie
        compile_cache.OWNED_ENV: folder,  # ours: a later start may re-point it
    }
    assert os.environ["TRITON_CACHE_DIR"] == chosen["TRITON_CACHE_DIR"]
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # nothing compiles through inductor any more
    monkeypatch.setenv("TRITON_CACHE_DIR", "/users/own/triton")
    assert configure_compile(SimpleNamespace(device="cpu", enforce_eager=True)) == {}
    assert os.environ["TRITON_CACHE_DIR"] == "/users/own/triton"


def _engine_start(model, cache, enforce_eager: bool) -> dict:
    """Start an engine on the tiny checkpoint in a fresh process; its cache variable and the heavy
    modules it loaded."""
    probe = (
        "import json, os, sys\nfrom model_optimizer.runtime.llm import LLM\n"
        f"llm = LLM({str(model)!r}, max_model_len=128, num_kv_blocks=16, enforce_eager={enforce_eager})\n"
        "llm.generate([[1, 2, 3]])\n"
        "print(json.dumps({'TRITON_CACHE_DIR': os.environ.get('TRITON_CACHE_DIR'),"
        " 'loaded': sorted(m for m in ('torch._inductor', 'torch._dynamo', 'transformers') if m in sys.modules)}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in compile_cache.CACHE_VARIABLES}
    env.update({compile_cache.CACHE_DIR_ENV: str(cache), "PYTHONPATH": str(REPO)})
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("enforce_eager", [False, True])
def test_engine_start_sets_the_cache_and_never_loads_inductor_dynamo_or_transformers(
    tiny_model, tmp_path, enforce_eager
):
    """With or without enforce_eager, building an engine and generating imports neither torch's
    compiler stack (seconds of import, and dynamo retraces in every process) nor transformers."""
    seen = _engine_start(tiny_model("qwen3"), tmp_path, enforce_eager)
    assert seen["TRITON_CACHE_DIR"].startswith(str(tmp_path))
    assert seen["loaded"] == []


def test_triton_key_is_hashed_in_a_thread_and_cached_for_the_first_kernel():
    """The thread fills Triton's own cache of its installation key: the first compile then reads it."""
    probe = (
        "import sys\n"
        "from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background, wait_for_triton_key\n"
        "thread = hash_triton_in_background(need_gpu=False)\n"
        "assert 'torch' not in sys.modules\n"
        "wait_for_triton_key()\n"
        "assert not thread.is_alive()\n"
        "from triton.runtime.cache import triton_key\n"
        "info = triton_key.cache_info()\n"
        "key = triton_key()\n"
        "print(info.currsize, triton_key.cache_info().hits, key.startswith(__import__('triton').__version__))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.split() == ["1", "1", "True"], out.stdout + out.stderr


def test_no_triton_key_thread_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert compile_cache.hash_triton_in_background() is None


def test_no_triton_key_thread_work_without_a_cuda_driver(monkeypatch):
    """A CPU machine (no libcuda) compiles nothing: no thread starts."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    monkeypatch.setattr(cuda_context, "DRIVER_LIBRARY", "libmopt-no-such-driver.so")
    assert compile_cache.hash_triton_in_background(need_gpu=True) is None


def test_the_key_is_looked_up_in_each_module_triton_versions_keep_it_in(monkeypatch):
    """Triton moved triton_key between modules: one that lacks it is passed over, not taken as the end.
    (Stand-in modules: the installed Triton has one layout only.)"""
    import types

    monkeypatch.setitem(sys.modules, "triton.runtime.cache", types.ModuleType("triton.runtime.cache"))
    older = types.ModuleType("triton.compiler.compiler")
    older.triton_key = lambda: "3.0.0-key"
    monkeypatch.setitem(sys.modules, "triton.compiler.compiler", older)
    assert compile_cache._import_triton_key()() == "3.0.0-key"
