"""CoreLoop: what runs an EngineCore, wherever it runs: apply the commands that arrived, step when
there is work and the gate lets it, and hand each step's outputs to whoever publishes them.

Two drivers share it: a thread of the frontend's own process (core_client.InprocClient: the
offline server in Python, tests) and the engine-core process of `mopt serve` (core_process.py).
Only how commands arrive and outputs leave differs; what a command does is written once here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from model_optimizer.runtime.engine.core import EngineCore
from model_optimizer.runtime.engine.messages import (
    ControlOp,
    CoreAbort,
    CoreCommand,
    CoreControl,
    CoreOutputs,
    CoreRequest,
    Finish,
    OutputsBuilder,
)
from model_optimizer.runtime.engine.step_gate import FAULT_ENV, StepGate, TestHooks

logger = logging.getLogger(__name__)


class CoreStopped(Exception):
    """A SHUTDOWN command was applied: the driver ends its loop (after publishing the answer)."""


class CoreLoop:
    def __init__(self, core: EngineCore, gate: StepGate, publish: Callable[[list[CoreOutputs]], None]) -> None:
        self.core = core
        self.gate = gate
        """Held: no step runs, commands still apply (PAUSE, tests; see step_gate.py)."""
        self.publish = publish
        """Called with one CoreOutputs per client after every step, and after commands that changed something."""
        hooks = TestHooks.from_env()
        self._fault_after_steps = hooks.fault_after_steps
        if hooks.hold_after_steps is not None:
            gate.hold()
            if hooks.hold_after_steps > 0:
                gate.allow(hooks.hold_after_steps)
        self._refused: list[OutputsBuilder] = [OutputsBuilder() for _ in range(core.num_clients)]
        self._acks: list[list[int]] = [[] for _ in range(core.num_clients)]
        self._declined: list[list[int]] = [[] for _ in range(core.num_clients)]
        """Per client, tokens of its acks whose answer is False (CoreOutputs.declined)."""
        self._changed = False
        self.paused = False
        """Held by a PAUSE (from any frontend) until a RESUME: what /is_paused says (a test hook's hold is not)."""

    @property
    def has_work(self) -> bool:
        return self.core.has_unfinished_requests()

    def apply(self, commands: list[CoreCommand]) -> None:
        """Apply commands in arrival order. Raises CoreStopped after SHUTDOWN, and the error of FAIL."""
        stop = False
        for command in commands:
            self._changed = True
            if isinstance(command, CoreRequest):
                self._add(command)
            elif isinstance(command, CoreAbort):
                self.core.abort(command.request_ids)
            elif isinstance(command, CoreControl):
                stop = self._control(command) or stop
        if stop:
            self.core.abort_all()
            self.flush()
            raise CoreStopped()

    def _add(self, request: CoreRequest) -> None:
        try:
            self.core.add_request(request)
        except ValueError as exc:  # the frontend checks first, so this is a bug; the request fails alone
            logger.error("core refused request %s: %s", request.request_id, exc)
            builder = self._refused[request.client if 0 <= request.client < len(self._refused) else 0]
            for index in range(request.params.n):
                row = builder.row(request.request_id, index, [], None)
                builder.finished.append(Finish(row, "error", None, f"the engine refused the request: {exc}"))

    def _control(self, command: CoreControl) -> bool:
        op = command.op
        if op is ControlOp.PAUSE:
            self.gate.hold()
            self.paused = True
        elif op is ControlOp.RESUME:
            self.gate.release()
            self.paused = False
        elif op is ControlOp.ABORT_ALL:
            self.core.abort_all()
        elif op is ControlOp.RESET_PREFIX_CACHE:
            if not self.core.reset_prefix_cache() and 0 <= command.client < len(self._declined):
                self._declined[command.client].append(command.token)
        elif op is ControlOp.FAIL:
            raise RuntimeError(command.arg or "engine failed on request")
        if 0 <= command.client < len(self._acks):
            self._acks[command.client].append(command.token)
        return op is ControlOp.SHUTDOWN

    def step(self) -> None:
        """One engine step (the gate has let it through); its outputs are published."""
        if self._fault_after_steps is not None and self.core.num_steps >= self._fault_after_steps:
            raise RuntimeError(f"injected engine fault after {self._fault_after_steps} steps ({FAULT_ENV})")
        self._publish(self.core.step())

    def flush(self) -> None:
        """Publish what commands changed while no step ran (abort rows, stats, acks), if anything."""
        if self._changed:
            self._publish(self.core.take_news())

    @staticmethod
    def _paused(out: CoreOutputs, paused: bool) -> CoreOutputs:
        out.paused = paused
        return out

    def _publish(self, outputs: list[CoreOutputs]) -> None:
        self._changed = False
        paused = self.paused  # to every client: a PAUSE or RESUME from one frontend is news to the others
        if any(b.num_rows for b in self._refused):  # refused requests' rows go first, on their own
            refused, self._refused = self._refused, [OutputsBuilder() for _ in self._refused]
            self.publish([self._paused(b.build(outputs[0].stats), paused) for b in refused])
        for client, out in enumerate(outputs):
            out.acks, self._acks[client] = self._acks[client], []
            out.declined, self._declined[client] = self._declined[client], []
            out.paused = paused
        self.publish(outputs)
