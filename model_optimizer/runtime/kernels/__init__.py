"""Triton kernels for the GPU, each beside the pure-torch reference it is tested against."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable


@functools.cache
def triton_kernel(module: str, name: str) -> Callable | None:
    """`model_optimizer.runtime.kernels.<module>.<name>`, or None where Triton cannot be imported.
    The layers ask on every call; the import is tried once."""
    try:
        kernels = importlib.import_module(f"{__name__}.{module}")
    except ImportError:
        return None
    return getattr(kernels, name)
