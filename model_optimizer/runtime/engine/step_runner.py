"""StepRunner: what the engine core needs of a model runner; the core's one seam to the model and torch.

The core (engine/core.py) is given a runner and calls only these; the real ones are
runner/model_runner.py's ModelRunner and, over worker processes, executor/executor.py's
TensorParallelExecutor. Tests and benchmarks pass fakes, so the core runs without a model.
"""

from __future__ import annotations

from typing import Any, Protocol

from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.sampler_output import Logprob


class StepRunner(Protocol):
    """What the core needs of a model runner (runner/model_runner.py's ModelRunner is the real one)."""

    def launch(self, scheduler_output: SchedulerOutput, pending: Any | None) -> Any:
        """Start computing a step; return a handle to collect it with. `pending` is the handle of the
        step still in flight (None if there is none): tokens this step needs but the host has not got
        yet are read from it on the device."""

    def collect(self, handle: Any) -> dict[str, tuple[int, Logprob | None]]:
        """Wait for a launched step: request id -> (sampled token id, logprob or None). Once per handle.
        A request that verified proposals gets (the token ids kept, their logprobs or None) instead.
        A runner that computes prompt logprobs returns a sampler_output.StepResults, which carries them.

        A runner that serves grammar-constrained requests also has `launch(..., sample=False)` (forward
        only), `token_mask_buffers(rows, masked, words)` (optional: host arrays for the masks) and
        `sample(handle, mask) -> handle` (the runner's ModelRunner and the tensor-parallel executor do);
        optionally `prepare(out, pending)` and `submit(prepared, pending, sample)`, `launch` in two halves."""
