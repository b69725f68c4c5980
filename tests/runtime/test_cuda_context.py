"""The CUDA context made in a thread during the core's imports (runtime/cuda_context.py)."""

from __future__ import annotations

import subprocess
import sys

import torch

from model_optimizer.runtime import cuda_context


def test_the_context_is_retained_exactly_where_torch_sees_a_gpu():
    assert cuda_context.retain_primary_context(0) == torch.cuda.is_available()


def test_no_driver_library_ends_the_thread_quietly(monkeypatch):
    monkeypatch.setattr(cuda_context, "DRIVER_LIBRARY", "libmopt-no-such-driver.so")
    assert cuda_context.retain_primary_context(0) is False
    thread = cuda_context.create_in_background(0)
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_an_ordinal_past_the_devices_is_refused():
    assert cuda_context.retain_primary_context(10_000) is False


def test_turned_off_starts_no_thread(monkeypatch):
    monkeypatch.setenv("MOPT_EARLY_CUDA", "0")
    assert cuda_context.create_in_background(0) is None


def test_the_core_process_module_does_not_import_torch():
    """The context only overlaps the imports if it starts before them: run_core starts it first thing."""
    code = "import sys, model_optimizer.runtime.core_process, model_optimizer.runtime.executor.worker; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
