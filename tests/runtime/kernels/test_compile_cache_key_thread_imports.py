"""Triton's key thread (kernels/compile_cache.hash_triton_in_background) imports nothing: Triton is imported
by the caller, so the main thread's own imports of Triton cannot race the thread's.

Imported in the thread, Triton raced a main thread whose first Triton import was a submodule
(`from triton.runtime.jit import ...`): Python's import locks then raised `_DeadlockError`, `KeyError:
'triton'`, or hung, in most runs. Each check runs in a fresh interpreter without TRITON_INTERPRET."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.runtime.server.test_process import REPO

ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_the_key_thread_imports_nothing():
    """Triton is whole when the call returns; the thread's work, run here under an import recorder, imports
    no module."""
    pytest.importorskip("triton.runtime.cache")
    probe = (
        "import sys, threading\n"
        "from model_optimizer.runtime.kernels import compile_cache\n"
        "started = []\n"
        "class Held(threading.Thread):\n"
        "    def start(self): started.append(self)\n"
        "compile_cache.threading.Thread = Held\n"
        "compile_cache.hash_triton_in_background(need_gpu=False)\n"
        "assert not sys.modules['triton'].__spec__._initializing and 'triton.runtime.cache' in sys.modules\n"
        "imported = []\n"
        "class Recorder:\n"
        "    def find_spec(self, name, path=None, target=None): imported.append(name)\n"
        "sys.meta_path.insert(0, Recorder())\n"
        "[thread] = started\n"
        "thread.run()\n"
        "print('imported in the thread:', imported)\n"
    )
    out, _ = _python(probe).communicate(timeout=120)
    assert out.strip().splitlines()[-1] == "imported in the thread: []", out


@pytest.mark.slow
def test_a_submodule_imported_beside_the_key_thread_loads_whole():
    """The race itself: the main thread imports Triton's submodules first thing, while the thread runs, at
    several offsets into the thread's start (before the fix most of these runs failed)."""
    pytest.importorskip("triton.backends.compiler")
    probe = (
        "import sys, time\n"
        "from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background\n"
        "thread = hash_triton_in_background(need_gpu=False)\n"
        "end = time.perf_counter() + float(sys.argv[1])\n"
        "while time.perf_counter() < end: pass\n"
        "from triton.runtime.jit import JITFunction\n"
        "import triton.backends.nvidia.compiler\n"
        "from triton.compiler.compiler import compile\n"
        "thread.join(120)\n"
        "import triton\n"
        "assert triton.jit and triton.language.constexpr and triton.compiler.compiler.compile\n"
        "print('whole')\n"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", probe, str(delay)],
            cwd=REPO,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for delay in (0.0, 0.02, 0.05, 0.1)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=120)
        assert run.returncode == 0 and out.strip().endswith("whole"), out[-2000:]


def test_no_thread_and_no_triton_import_without_a_cuda_driver():
    """A CPU machine (no libcuda): nothing compiles, so the caller pays no Triton import either."""
    probe = (
        "import sys\n"
        "from model_optimizer.runtime import cuda_context\n"
        "from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background\n"
        "cuda_context.DRIVER_LIBRARY = 'libmopt-no-such-driver.so'\n"
        "print(hash_triton_in_background(need_gpu=True), 'triton' in sys.modules)\n"
    )
    out, _ = _python(probe).communicate(timeout=120)
    assert out.split() == ["None", "False"], out
