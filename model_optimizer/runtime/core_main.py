"""Inside the engine core process (core_process.py spawns it, and its docstring tells the whole life):
`run_core` loads the model behind an EngineCore, binds the ZeroMQ sockets, reports ready over the pipe,
then runs the CoreLoop (engine/core_loop.py) over the sockets until a frontend sends SHUTDOWN, its parent
dies or a step fails; and the signal handling that leaves stopping to the frontend."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_optimizer.common.processes import exit_with_parent, freeze_startup_objects, unfreeze_objects
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.cuda_context import create_in_background
from model_optimizer.runtime.engine.messages import (
    ControlOp,
    CoreControl,
    CoreOutputs,
    CoreRequest,
    decode_command,
    encode,
)
from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background
from model_optimizer.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:  # the engine's modules (numpy, the scheduler, grammars) load in the core, once it runs
    from model_optimizer.runtime.engine.core import EngineCore

logger = logging.getLogger(__name__)
POLL_MS = 500
"""Longest wait for a command when there is no step to run."""


@dataclass(frozen=True)
class CoreSpec:
    """What the core process needs (pickled into it)."""

    config: EngineConfig
    input_address: str
    output_addresses: list[str]
    parent_pid: int
    log_levels: tuple[tuple[str, int], ...] = ()


def run_core(spec: CoreSpec, conn: Connection) -> None:
    """Entry point of the core process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the frontend drains, then stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # while it loads: nothing to drain, SIGTERM ends it
    exit_with_parent(spec.parent_pid)
    _configure_logging(spec.log_levels)
    if spec.config.device != "cpu":  # rank 0 drives GPU 0; its context and Triton's key are made while
        create_in_background(0)  # _load imports torch
        hash_triton_in_background()
    try:
        core, extra = _load(spec.config, len(spec.output_addresses))
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the frontend raises it with this text
        _send_quietly(conn, ("error", (type(exc).__name__, str(exc), traceback.format_exc())))
        sys.exit(2 if isinstance(exc, ValueError) else 1)
    import zmq

    context = zmq.Context()
    inbox = context.socket(zmq.PULL)
    inbox.bind(spec.input_address)
    outboxes = []
    for address in spec.output_addresses:
        sock = context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)  # a slow frontend must never block the step loop
        sock.setsockopt(zmq.LINGER, 2000)  # the last outputs (an error) still reach it as the process ends
        sock.bind(address)
        outboxes.append(sock)
    watch = getattr(core.runner, "on_worker_death", None)
    if watch is not None:  # a tensor-parallel worker that dies while no step runs fails the core at once
        watch(lambda exc: _inject_failure(context, spec.input_address, exc))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # serving: only its frontend stops it (core_process.py)
    _send_quietly(conn, ("ready", {"info": core.info, "extra": extra}))
    conn.close()
    freeze_startup_objects()
    code = _serve(core, inbox, outboxes)
    unfreeze_objects()
    core.close()
    for sock in (inbox, *outboxes):
        sock.close()
    context.term()
    sys.exit(code)


def _load(config: EngineConfig, num_clients: int) -> tuple[EngineCore, dict]:
    """The model loaded and warmed up behind an EngineCore, each start-up phase logged as `LLM` logs it
    (the frontends tokenize; the core only needs the tokenizer's EOS id when the folder names none)."""
    start = time.perf_counter()
    import model_optimizer.runtime.runner.model_runner  # noqa: F401 - torch, as LLM's `imports` phase counts it
    from model_optimizer.runtime.engine.core import EngineCore
    from model_optimizer.runtime.hub import resolve_model_dir
    from model_optimizer.runtime.kernels.compile_cache import configure_compile
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.startup import load_runner, log_phase

    phase = log_phase("imports", start)
    configure_compile(config)
    model_dir = resolve_model_dir(config.model, config.revision)
    phase = log_phase("config", phase)
    tokenizer = (
        None
        if config.skip_tokenizer_init
        else load_tokenizer(Path(config.tokenizer) if config.tokenizer else model_dir, required=False)
    )
    log_phase("tokenizer", phase)
    runner, info = load_runner(config, model_dir, tokenizer)  # logs weights, KV cache, warm-up, graph capture
    phase = time.perf_counter()
    core = EngineCore(config, runner, info, num_clients, tokenizer=tokenizer)
    core.add_request(CoreRequest("warm-up", [1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0), 2))
    while core.has_unfinished_requests():  # the first requests' path, so no user pays for it
        core.step()
    _reset_counters(core)
    log_phase("engine", phase)
    log_phase("total", start)
    model = getattr(runner, "model", None)
    if model is not None:  # a quantized linear counts as the weight it stands for
        from model_optimizer.runtime.layers.quantization.summary import summarize_weights

        summary = summarize_weights(model)
        extra = {"num_params": summary.num_params, "weights": summary.describe()}
    else:  # tensor parallel: rank 0 summarized its shard's model the same way
        extra = {"num_params": runner.info.get("num_params", 0), "weights": runner.info.get("weights", "?")}
    return core, extra


def _reset_counters(core: EngineCore) -> None:
    """Zero the since-start counters the warm-up moved, so /metrics counts only what clients sent: the core's
    tokens and steps, the prefix cache's lookups and hits, speculative decoding's proposals."""
    from model_optimizer.runtime.engine.kv_cache import PrefixCacheStats
    from model_optimizer.runtime.spec_decode.counters import SpecCounters

    core.num_prompt_tokens = core.num_generation_tokens = core.num_steps = 0
    core.kv_cache.stats = PrefixCacheStats()
    core.scheduler.spec_counters = SpecCounters()


def _serve(core: EngineCore, inbox: Any, outboxes: list[Any]) -> int:
    """The core loop over sockets; returns the exit code (0 after SHUTDOWN, 1 after a failure)."""
    import zmq

    from model_optimizer.runtime.engine.core_loop import CoreLoop, CoreStopped
    from model_optimizer.runtime.engine.step_gate import StepGate

    lock = threading.Lock()
    gate = StepGate(lock, threading.Condition(lock))

    def publish(outputs: list[CoreOutputs]) -> None:
        for sock, out in zip(outboxes, outputs):
            try:  # never blocks: a frontend that is not connected yet asks for the stats when it is
                sock.send(encode(out), zmq.NOBLOCK)
            except zmq.Again:
                pass

    loop = CoreLoop(core, gate, publish)
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    try:
        while True:
            may_step = loop.has_work and gate._may_step()
            if poller.poll(0 if may_step else POLL_MS):
                loop.apply(_drain(inbox))
            if loop.has_work and gate._pass():
                loop.step()
            else:
                loop.flush()
    except CoreStopped:
        return 0
    except BaseException as exc:  # noqa: BLE001 - every frontend must hear of it before the process ends
        logger.exception("engine core failed")
        message = f"{type(exc).__name__}: {exc}"
        for sock in outboxes:
            out = CoreOutputs([], b"", b"", b"", b"", error=message)
            try:
                sock.send(encode(out), zmq.NOBLOCK)
            except zmq.Again:
                pass
        return 1


def _drain(inbox: Any) -> list:
    import zmq

    commands = []
    while True:
        try:
            commands.append(decode_command(inbox.recv(zmq.NOBLOCK)))
        except zmq.Again:
            return commands


def _inject_failure(context: Any, address: str, exc: BaseException) -> None:
    """From the TP watchdog thread: put a FAIL command in the core's own inbox."""
    import zmq

    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(address)
    sock.send(encode(CoreControl(ControlOp.FAIL, arg=str(exc))))
    sock.close()


def _configure_logging(levels: tuple[tuple[str, int], ...]) -> None:
    """A spawned process starts without the frontend's logging set-up: lines to stderr, tagged `core`."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s core %(name)s: %(message)s"))
    top = logging.getLogger("model_optimizer")
    top.addHandler(handler)
    top.propagate = False
    for name, level in levels:
        logging.getLogger(name).setLevel(level)


def _send_quietly(conn: Connection, message: Any) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass  # the frontend is gone


__all__ = ["CoreSpec", "run_core"]
