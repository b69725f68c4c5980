"""torch probe: version, the CUDA it was built for, whether it sees the GPU, compute capability,
bf16 and fp8 support. Runs in a child process so that a CUDA initialisation that hangs or
crashes costs a timeout, not the doctor itself; the child's warnings and init error are kept
(they are often the best diagnosis: "Found no NVIDIA driver on your system")."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from model_optimizer.environment._util import run_cmd

# Self-contained: runs under `python -c`, prints one JSON object on its last line.
TORCH_SCRIPT = r"""
import json, warnings
out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import torch
    except Exception as exc:
        print(json.dumps({"installed": False, "error": f"{type(exc).__name__}: {exc}"}))
        raise SystemExit(0)
    out["installed"] = True
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    out["debug"] = bool(getattr(torch.version, "debug", False))
    def attempt(key, fn):
        try:
            out[key] = fn()
        except Exception as exc:
            out.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
    def bf16_native():
        # native bf16 only: by default torch also counts bf16 emulated without tensor cores (Volta, Turing);
        # torch before 2.3 has no such argument and counts native support only
        try:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:
            return torch.cuda.is_bf16_supported()
    attempt("cudnn", lambda: torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
    attempt("nccl", lambda: ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None)
    attempt("arch_list", torch.cuda.get_arch_list)
    out["has_fp8_dtypes"] = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")
    out["has_scaled_mm"] = hasattr(torch, "_scaled_mm")
    out["num_threads"] = torch.get_num_threads()
    attempt("cuda_available", torch.cuda.is_available)
    attempt("device_count", torch.cuda.device_count)
    try:
        torch.cuda.init()
    except Exception as exc:
        out["init_error"] = f"{type(exc).__name__}: {exc}"
    if out.get("cuda_available"):
        devices = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            dev = {"index": i, "name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                   "total_memory": p.total_memory, "multi_processor_count": p.multi_processor_count}
            try:
                free, total = torch.cuda.mem_get_info(i)
                dev["free_memory"] = free
            except Exception as exc:
                dev["mem_get_info_error"] = f"{type(exc).__name__}: {exc}"
            devices.append(dev)
        out["devices"] = devices
        attempt("bf16_supported", bf16_native)
        attempt("driver_cuda_version", lambda: torch._C._cuda_getDriverVersion())
out["warnings"] = sorted({str(w.message) for w in caught})
print(json.dumps(out))
"""


def probe_torch(timeout_s: float = 90.0) -> dict[str, Any]:
    """Run TORCH_SCRIPT under this interpreter and return its JSON report."""
    env = dict(os.environ, CUDA_MODULE_LOADING="LAZY")
    result = run_cmd([sys.executable, "-c", TORCH_SCRIPT], timeout_s=timeout_s, env=env)
    if result.get("timed_out"):
        raise TimeoutError(f"torch import/CUDA init did not finish in {timeout_s:g} s")
    lines = [line for line in (result.get("stdout") or "").splitlines() if line.startswith("{")]
    if not lines:
        stderr = (result.get("stderr") or "").strip()
        raise RuntimeError(f"torch probe exited with {result.get('rc')}: {stderr[-2000:] or 'no output'}")
    report = json.loads(lines[-1])
    report["python"] = sys.executable
    return report
