"""One tensor-parallel rank: a spawned process holding a ModelRunner over its shard of the model.

The driver (executor/executor.py) starts one per rank and talks to each over its own pipe. A worker
joins the group, builds its ModelRunner (load, profile, agree on the number of KV blocks with
`min_over_ranks`, allocate, warm up, capture graphs), reports ready, then mirrors the engine's
pipeline: each launch message queues a step (reading the newest uncollected step's ids when the
driver says a step is pending), each collect message collects the oldest. Rank 0 alone samples and
replies; the others receive its ids by a broadcast inside `launch` (runner/model_runner.py).

A worker never outlives its driver: it exits when its pipe reaches EOF (the driver closed it, exited
or was killed) and, should it be stuck in a collective instead, a watchdog thread exits the process
once its parent is gone, so a `kill -9` of the driver leaves no GPU memory held.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from model_optimizer.common.processes import exit_with_parent
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.cuda_context import create_in_background
from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background

LAUNCH, LAUNCH_PENDING, COLLECT, CLOSE = b"L", b"P", b"C", b"X"
"""First byte of each driver message: launch (nothing pending / newest step pending), collect, close."""
FORWARD, FORWARD_PENDING, SAMPLE = b"F", b"G", b"M"
"""A launch in two (grammar masks, engine/core.py): the forward (as LAUNCH / LAUNCH_PENDING), then the
newest step's sampling, with rank 0's masks pickled after the byte (None for the other ranks)."""
PREPARE, PREPARE_PENDING, SUBMIT = b"R", b"Q", b"U"
"""A launch in two halves (ModelRunner.prepare / submit): the step's inputs written (as LAUNCH /
LAUNCH_PENDING), then, after the newest step's SAMPLE, its forward queued; SUBMIT's second byte says
whether it samples too (b"1") or waits for a SAMPLE of its own (b"0")."""
PROFILE_START, PROFILE_STOP = b"S", b"E"
"""Benchmarks only: rank 0 profiles the device kernels of the steps in between (executor/step_profile.py)."""

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
"""NVLink multicast stays off: the lent GPU machines do not support it (set unless the user chose)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to start (pickled into the spawned process)."""

    rank: int
    config: EngineConfig
    model_dir: Path
    init_method: str
    """Where the ranks meet (a file:// URL in a folder the driver owns)."""
    parent_pid: int
    """The driver's pid: the worker exits once its parent is another process."""
    log_levels: tuple[tuple[str, int], ...] = ()
    """(logger name, level) as the driver has them (model_optimizer, its start-up phases); ranks other
    than 0 log warnings and worse only, so each start-up line appears once."""


def _configure_logging(rank: int, levels: tuple[tuple[str, int], ...]) -> None:
    """Spawned processes start without the driver's logging set-up: lines to stderr, tagged with the rank."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s tp-rank{rank} %(name)s: %(message)s"))
    top = logging.getLogger("model_optimizer")
    top.addHandler(handler)
    top.propagate = False
    for name, level in levels:
        logging.getLogger(name).setLevel(level if rank == 0 else max(level, logging.WARNING))


def _device(config: EngineConfig, rank: int) -> Any:
    import torch

    from model_optimizer.runtime.device import pick_device

    device = pick_device(config.device)
    if device.type != "cuda":
        from model_optimizer.environment.cpu_speed import apply_cpu_threads

        apply_cpu_threads(share=config.tensor_parallel_size)  # before init: the ranks split the CPU's threads
        return device
    torch.cuda.set_device(rank)  # rank r drives GPU r; the runner's "cuda" tensors land there
    return torch.device("cuda", rank)


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Entry point of a spawned worker; returns (exit code 0) after a close message or the driver's EOF."""
    # Ctrl-C and a group's SIGTERM (a service manager's stop) reach every process: the driver decides, and a
    # worker ends with it (exit_with_parent) or on its close message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_with_parent(spec.parent_pid)  # even while the main thread waits in a collective
    _configure_logging(spec.rank, spec.log_levels)
    rank, config = spec.rank, spec.config
    if config.device != "cpu":  # GPU `rank`'s context and Triton's key are made while the imports below run
        create_in_background(rank)
        hash_triton_in_background()
    for key, value in MULTICAST_OFF.items():
        os.environ.setdefault(key, value)
    try:
        from model_optimizer.runtime.distributed import init_tensor_parallel
        from model_optimizer.runtime.layers.quantization.summary import summarize_weights
        from model_optimizer.runtime.runner.model_runner import ModelRunner

        device = _device(config, rank)
        init_tensor_parallel(rank, config.tensor_parallel_size, spec.init_method, device, config.enable_expert_parallel)
        runner = ModelRunner(config, spec.model_dir)
        weights = summarize_weights(runner.model)  # a quantized linear counts as the weight it stands for
        conn.send(
            (
                "ready",
                {
                    "vocab_size": runner.vocab_size,
                    "max_model_len": runner.max_model_len,
                    "num_kv_blocks": runner.num_kv_blocks,
                    "num_host_kv_blocks": runner.num_host_kv_blocks,
                    "num_params": weights.num_params,
                    "weights": weights.describe(),
                    "dtype": str(runner.dtype).removeprefix("torch."),
                    "device_type": runner.device_type,
                },
            )
        )
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the driver raises it with this text
        _report(conn, exc)
        sys.exit(1)
    try:
        _serve(runner, conn, rank)
    except EOFError:
        pass  # the driver is gone: nothing left to serve
    except BaseException as exc:  # noqa: BLE001 - reported, then the process exits non-zero
        _report(conn, exc)
        sys.exit(1)
    finally:
        from model_optimizer.runtime.distributed import destroy_tensor_parallel

        destroy_tensor_parallel()


def _serve(runner: Any, conn: Connection, rank: int) -> None:
    """The step loop: mirror the driver's launches and collects until it says close (or its pipe ends)."""
    import torch

    handles: deque = deque()  # launched, not yet collected, oldest first (as the engine's own)
    profile, profiled_steps = None, 0
    prepared = None  # a step between PREPARE and SUBMIT
    with torch.inference_mode():
        while True:
            message = conn.recv_bytes()
            kind = message[:1]
            if kind in (LAUNCH, LAUNCH_PENDING, FORWARD, FORWARD_PENDING):
                pending = handles[-1] if kind in (LAUNCH_PENDING, FORWARD_PENDING) else None
                sample = kind in (LAUNCH, LAUNCH_PENDING)
                handles.append(runner.launch(pickle.loads(message[1:]), pending, sample=sample))
            elif kind in (PREPARE, PREPARE_PENDING):
                pending = handles[-1] if kind == PREPARE_PENDING else None
                prepared = runner.prepare(pickle.loads(message[1:]), pending)
            elif kind == SUBMIT:  # the newest handle: the one it was prepared with, now sampled
                pending = handles[-1] if handles else None
                handles.append(runner.submit(prepared, pending, sample=message[1:2] == b"1"))
                prepared = None
            elif kind == SAMPLE:
                handles[-1] = runner.sample(handles[-1], pickle.loads(message[1:]))
            elif kind == COLLECT:
                results = runner.collect(handles.popleft())
                profiled_steps += 1
                if rank == 0:
                    conn.send(("ok", results))
            elif kind == PROFILE_START and rank == 0:
                from model_optimizer.runtime.executor.step_profile import start_profile

                profile, profiled_steps = start_profile(), 0
            elif kind == PROFILE_STOP and rank == 0:
                from model_optimizer.runtime.executor.step_profile import stop_profile

                trace = message[1:].decode() or None
                conn.send(("ok", stop_profile(profile, profiled_steps, trace) if profile else {}))
                profile = None
            elif kind in (PROFILE_START, PROFILE_STOP):
                pass  # rank 0's alone
            elif kind == CLOSE:
                return
            else:
                raise RuntimeError(f"unknown message {kind!r} from the driver")


def _report(conn: Connection, exc: BaseException) -> None:
    """Send the failure to the driver: exception type, message and traceback text (best effort)."""
    try:
        conn.send(("error", (type(exc).__name__, str(exc), traceback.format_exc())))
    except (OSError, ValueError, pickle.PicklingError):
        pass  # the driver is gone too
