"""The CUDA context created in a thread while the process imports torch.

Creating a GPU's primary context takes ~0.2 s on the H200 (the driver's `cuInit` and
`cuDevicePrimaryCtxRetain`), and torch does it only when it first touches CUDA, after its own import
(~2-3 s) is done. The engine core and the tensor-parallel workers know their GPU before they import
anything heavy, so they call `create_in_background(ordinal)` first: the driver calls run through
ctypes, which releases the GIL, beside the imports, and torch later finds the context made and
retains it instead of creating it (`benchmarks/results/cold_start_h200/probe_cuda_h200.json`: the
CUDA part after the imports 0.02 s instead of 0.31-0.36 s).

Nothing here can fail a start: without a driver library, a GPU or a working driver the thread ends
quietly and torch reports what is wrong as before. `MOPT_EARLY_CUDA=0` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import threading

DRIVER_LIBRARY = "libcuda.so.1"
"""The CUDA driver's library, loaded by name (its absence means no GPU can run here)."""


def create_in_background(ordinal: int) -> threading.Thread | None:
    """Start retaining device `ordinal`'s primary context (CUDA_VISIBLE_DEVICES numbering, as torch's) in
    a daemon thread; None where it is turned off."""
    if os.environ.get("MOPT_EARLY_CUDA", "1") == "0":
        return None
    thread = threading.Thread(target=retain_primary_context, args=(ordinal,), name="mopt-cuda-context", daemon=True)
    thread.start()
    return thread


def load_driver() -> ctypes.CDLL | None:
    """The CUDA driver's library, or None where it cannot be loaded (no GPU can run here)."""
    try:
        return ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return None


def retain_primary_context(ordinal: int) -> bool:
    """Initialise the driver and retain device `ordinal`'s primary context; False where there is no driver,
    no such device or the driver refuses (torch will say why when it tries)."""
    driver = load_driver()
    if driver is None:
        return False
    device = ctypes.c_int()
    context = ctypes.c_void_p()
    return (
        driver.cuInit(0) == 0
        and driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0
        and driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    )
