"""Run one picklable function in N real processes joined by a gloo group; return each rank's result.

The tensor-parallel tests need real ranks (a process each, real collectives), not a fake group:
`run_ranks(fn, 2, *args)` starts two spawned processes, each joins the group through a file in a
fresh temporary folder (no TCP port to collide with other test runs), calls `fn(*args)` with
`get_tp()` set to its rank, and sends its result back. The list comes back in rank order.

`fn` must be importable by name from a module (a top-level function in a test module or in
tests/runtime/*), and its arguments and result picklable: results travel as `torch.save` bytes
(plain pickle cannot rebuild float8 tensors), never as shared memory, so a result outlives the
process that made it. A rank that raises
makes `run_ranks` raise RuntimeError with that rank's traceback; a rank that dies without a word
(killed, segfault) is reported by its exit code rather than left to hang the test.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import queue
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ERROR_GRACE_S = 10.0
"""After one rank failed, how long the others may take to report their own failure (see _with_other_errors)."""
HANG_TIMEOUT_S = 300.0
"""Only a safety net for a deadlocked collective: no test relies on anything finishing within it."""


def _rank_main(
    rank: int, size: int, init_file: str, device_type: str, fn: Callable[..., Any], args: tuple, results: Any
) -> None:
    import torch

    from model_optimizer.runtime.distributed import destroy_tensor_parallel, init_tensor_parallel

    torch.set_num_threads(1)  # the test machine's cores are shared; N ranks each wanting all of them thrash
    try:
        device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        init_tensor_parallel(rank, size, f"file://{init_file}", device)
        try:
            payload = ("ok", fn(*args))
        finally:
            destroy_tensor_parallel()
    except BaseException:  # noqa: BLE001 - any failure goes back to the parent, with its traceback
        payload = ("error", traceback.format_exc())
    buffer = io.BytesIO()
    try:
        torch.save(payload, buffer)
    except Exception:  # noqa: BLE001 - an unpicklable result is the test's bug: say so
        buffer = io.BytesIO()
        torch.save(("error", "the result cannot be pickled:\n" + traceback.format_exc()), buffer)
    results.put((rank, buffer.getvalue()))


def run_ranks(
    fn: Callable[..., Any], size: int, *args: Any, device: str = "cpu", timeout_s: float = HANG_TIMEOUT_S
) -> list[Any]:
    """`fn(*args)` on ranks 0..size-1, one process each: a gloo group on the CPU, or with
    `device="cuda"` an NCCL group where rank r runs on GPU r (tests/gpu); results in rank order."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="tp-") as tmp:
        init_file = str(Path(tmp) / "rendezvous")
        procs = [
            ctx.Process(target=_rank_main, args=(r, size, init_file, device, fn, args, results), daemon=True)
            for r in range(size)
        ]
        for p in procs:
            p.start()
        try:
            payloads = _gather(procs, results, timeout_s)
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
    errors = [f"rank {r}:\n{value}" for r, (status, value) in sorted(payloads.items()) if status == "error"]
    if errors:
        raise RuntimeError("tensor-parallel rank failed\n" + "\n".join(errors))
    return [payloads[r][1] for r in range(size)]


def _gather(procs: list, results: Any, timeout_s: float) -> dict[int, tuple[str, Any]]:
    payloads: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while len(payloads) < len(procs):
        try:
            rank, data = results.get(timeout=1.0)
            payloads[rank] = _loads(data)
            if payloads[rank][0] == "error":
                return _with_other_errors(procs, results, payloads)
            continue
        except queue.Empty:
            pass
        dead = [r for r, p in enumerate(procs) if r not in payloads and p.exitcode is not None]
        if dead:
            # a rank may have put its result just before exiting: drain once more before blaming it
            try:
                while True:
                    rank, data = results.get(timeout=1.0)
                    payloads[rank] = _loads(data)
            except queue.Empty:
                pass
            dead = [r for r in dead if r not in payloads]
            if dead:
                codes = ", ".join(f"rank {r} exit code {procs[r].exitcode}" for r in dead)
                raise RuntimeError(f"tensor-parallel rank died without a result: {codes}")
        if time.monotonic() > deadline:
            missing = [r for r in range(len(procs)) if r not in payloads]
            raise RuntimeError(f"tensor-parallel ranks {missing} gave no result within {timeout_s:.0f} s (deadlock?)")
    return payloads


def _with_other_errors(procs: list, results: Any, payloads: dict, grace_s: float = ERROR_GRACE_S) -> dict:
    """After a first error, the other ranks' reports too: the first to arrive may be a consequence (a
    peer's connection reset in a collective) of the cause another rank is still sending. Waits until
    each rank has reported or exited (an exited rank's queued report is flushed), at most `grace_s` for
    ranks stuck in a collective, which run_ranks then kills."""
    grace = time.monotonic() + grace_s
    while len(payloads) < len(procs) and time.monotonic() < grace:
        try:
            rank, data = results.get(timeout=0.2)
            payloads[rank] = _loads(data)
        except queue.Empty:
            if all(r in payloads or p.exitcode is not None for r, p in enumerate(procs)):
                break
    try:
        while True:
            rank, data = results.get_nowait()
            payloads[rank] = _loads(data)
    except queue.Empty:
        pass
    return payloads


def _loads(data: bytes) -> tuple[str, Any]:
    import torch

    return torch.load(io.BytesIO(data), weights_only=False)  # our own children's bytes: trusted
