"""`mopt doctor --bench`: microbenchmarks against the datasheet.

Measures device-to-device copy bandwidth (bytes read + written), pinned host->device and
device->host bandwidth, and bf16, fp16 and fp8 (e4m3, torch._scaled_mm; compute capability
8.9+) matmul TFLOP/s on random data. Each figure is the median of several samples, each sample
the mean of a few back-to-back operations timed with CUDA events after warm-up, and is compared
with the GPU's datasheet (copies to the PCIe link the GPU supports); below FLAG_BELOW of it is
flagged. Runs on the CPU too (wall-clock timing, small sizes) so the code is testable without a GPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from model_optimizer.environment.knowledge import cc_at_least, gpu_spec, pcie_gbps

FLAG_BELOW = 0.5  # flag a figure under half of its reference


@dataclass
class BenchSizes:
    """How big and how often; the defaults suit a datacenter GPU and take ~15 s."""

    copy_bytes: int = 1 << 30
    """Bytes per device-to-device copy."""
    transfer_bytes: int = 256 << 20
    """Bytes per host<->device transfer."""
    matmul_n: int = 8192
    """M = N = K of the square matmuls."""
    warmup: int = 3
    """Untimed runs before timing (clocks ramp up, cuBLAS picks its kernel)."""
    samples: int = 7
    """Timed samples; the median is reported."""
    inner: int = 10
    """Operations per timed sample."""


def run_bench(
    device: str = "cuda",
    index: int = 0,
    sizes: BenchSizes | None = None,
    fp8: bool | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every microbenchmark on one device; never raises for a failing benchmark."""
    import torch

    sizes = sizes or BenchSizes()
    if device == "cuda" and not torch.cuda.is_available():
        return {"ok": False, "reason": "no CUDA device visible to torch"}
    dev = torch.device(device, index) if device == "cuda" else torch.device("cpu")
    info = _device_info(torch, dev)
    spec = gpu_spec(info.get("name")) or {}
    if device == "cuda":
        free = torch.cuda.mem_get_info(index)[0]
        sizes.copy_bytes = int(min(sizes.copy_bytes, free // 8))  # two buffers, with room to spare
    use_fp8 = cc_at_least(info.get("compute_capability"), "8.9") if fp8 is None else fp8
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("d2d_copy", lambda: _copy_d2d(torch, dev, sizes, spec)),
        ("h2d_pinned", lambda: _transfer(torch, dev, sizes, spec, to_device=True)),
        ("d2h_pinned", lambda: _transfer(torch, dev, sizes, spec, to_device=False)),
        ("matmul_bf16", lambda: _matmul(torch, dev, sizes, spec, "bf16")),
        ("matmul_fp16", lambda: _matmul(torch, dev, sizes, spec, "fp16")),
    ]
    if use_fp8:
        steps.append(("matmul_fp8", lambda: _matmul(torch, dev, sizes, spec, "fp8")))
    start = time.monotonic()
    results = []
    for name, fn in steps:
        if on_step:
            on_step(name)
        try:
            results.append({"name": name, **fn()})
        except Exception as exc:  # one failing benchmark must not hide the others
            results.append({"name": name, "label": name, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
    return {
        "ok": True,
        "device_index": index,
        "device": info,
        "datasheet": spec.get("name"),
        "flag_below": FLAG_BELOW,
        "sizes": asdict(sizes),
        "fp8_skipped": None if use_fp8 else "compute capability below 8.9",
        "results": results,
        "elapsed_s": round(time.monotonic() - start, 2),
    }


def _device_info(torch: Any, dev: Any) -> dict[str, Any]:
    if dev.type != "cuda":
        return {"name": "cpu", "compute_capability": None, "torch": torch.__version__}
    p = torch.cuda.get_device_properties(dev)
    return {
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "multi_processor_count": p.multi_processor_count,
        "total_memory": p.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def _timed_ms(torch: Any, dev: Any, op: Callable[[], Any], sizes: BenchSizes) -> list[float]:
    """Milliseconds per operation, one value per sample."""
    for _ in range(sizes.warmup):
        op()
    _sync(torch, dev)
    out = []
    for _ in range(sizes.samples):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(sizes.inner):
                op()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / sizes.inner)
        else:
            t0 = time.perf_counter()
            for _ in range(sizes.inner):
                op()
            out.append((time.perf_counter() - t0) * 1000 / sizes.inner)
    return out


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _result(
    label: str,
    unit: str,
    per_op: float,
    samples_ms: list[float],
    reference: float | None,
    reference_kind: str,
    params: dict[str, Any],
) -> dict[str, Any]:
    """`per_op` is the work of one operation (bytes or FLOP) scaled to the unit per second."""
    ms = statistics.median(samples_ms)
    value = per_op / (ms / 1000.0)
    pct = round(100.0 * value / reference, 1) if reference else None
    return {
        "label": label,
        "value": float(f"{value:.5g}"),
        "unit": unit,
        "median_ms": round(ms, 4),
        "samples_ms": [round(s, 4) for s in samples_ms],
        "reference": reference,
        "reference_kind": reference_kind,
        "pct_of_reference": pct,
        "flagged": bool(pct is not None and pct < FLAG_BELOW * 100),
        "params": params,
    }


def _copy_d2d(torch: Any, dev: Any, sizes: BenchSizes, spec: dict[str, Any]) -> dict[str, Any]:
    n = sizes.copy_bytes
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    samples = _timed_ms(torch, dev, lambda: dst.copy_(src), sizes)
    # a copy reads n bytes and writes n bytes
    return _result(
        "device-to-device copy",
        "GB/s",
        2 * n / 1e9,
        samples,
        spec.get("memory_bandwidth_gbps"),
        "datasheet memory bandwidth",
        {"bytes": n, "counted": "read + write"},
    )


def _transfer(torch: Any, dev: Any, sizes: BenchSizes, spec: dict[str, Any], to_device: bool) -> dict[str, Any]:
    if dev.type != "cuda":
        raise RuntimeError("host<->device transfers need a CUDA device")
    n = sizes.transfer_bytes
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    op = (lambda: gpu.copy_(host, non_blocking=True)) if to_device else (lambda: host.copy_(gpu, non_blocking=True))
    samples = _timed_ms(torch, dev, op, sizes)
    link = spec.get("pcie") or {}
    reference = pcie_gbps(link.get("gen"), link.get("width"))
    kind = f"PCIe gen{link.get('gen')} x{link.get('width')} one-way" if reference else "no datasheet"
    label = "host-to-device (pinned)" if to_device else "device-to-host (pinned)"
    return _result(label, "GB/s", n / 1e9, samples, reference, kind, {"bytes": n})


def _matmul(torch: Any, dev: Any, sizes: BenchSizes, spec: dict[str, Any], kind: str) -> dict[str, Any]:
    n = sizes.matmul_n
    gen = torch.Generator(device=dev).manual_seed(0)
    if kind == "fp8":
        a = torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn)
        b = (
            torch.randn(n, n, device=dev, generator=gen).to(torch.float8_e4m3fn).t()
        )  # column-major, as _scaled_mm wants
        scale = torch.tensor(1.0, device=dev)
        op = lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)  # noqa: E731
        label = "fp8 e4m3 matmul (_scaled_mm)"
    else:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        a = torch.randn(n, n, device=dev, generator=gen, dtype=dtype)
        b = torch.randn(n, n, device=dev, generator=gen, dtype=dtype)
        out = torch.empty(n, n, device=dev, dtype=dtype)
        op = lambda: torch.matmul(a, b, out=out)  # noqa: E731
        label = f"{kind} matmul"
    samples = _timed_ms(torch, dev, op, sizes)
    reference = (spec.get("tflops") or {}).get(kind)
    return _result(
        label,
        "TFLOP/s",
        2 * n**3 / 1e12,
        samples,
        reference,
        "datasheet dense" if reference else "no datasheet",
        {"m": n, "n": n, "k": n, "data": "random normal"},
    )
