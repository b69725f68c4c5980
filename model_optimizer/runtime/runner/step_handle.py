"""StepHandle: a launched step, and the copy of its sampled ids (and logprobs) that brings them to the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from model_optimizer.runtime.layers.sampler import SampledTokens, SamplingInput
from model_optimizer.runtime.runner.input_batch import CachedRequestState, PendingTokens
from model_optimizer.runtime.runner.prompt_logprobs import PendingPromptLogprobs


def start_copy(sampled: SampledTokens) -> tuple[torch.Tensor | None, torch.cuda.Event | None]:
    """Start copying the checked ids (NONFINITE_TOKEN where the logits were not finite) and, when a
    request asked for them, the reduced logprobs to pinned memory; one event covers them all."""
    if not sampled.token_ids.is_cuda:
        return None, None
    checked = sampled.checked_ids()  # the flag rides with the ids: one copy, no extra sync
    host = torch.empty(checked.shape, dtype=checked.dtype, pin_memory=True)
    host.copy_(checked, non_blocking=True)
    if sampled.logprobs is not None:
        sampled.logprobs.start_copy()  # read in collect after `done`: no .item() on a busy queue
    done = torch.cuda.Event()
    done.record()
    return host, done


@dataclass(frozen=True)
class StepHandle:
    """A launched step, fixed once launched: its sampling requests and, on the device, what they drew."""

    states: list[CachedRequestState]
    batch: list[SamplingInput]
    sampled: SampledTokens | None
    """Ids (num_samples,) on the device, their finite flags and raw logprobs."""
    host: torch.Tensor | None = None
    """Pinned host copy of the checked ids (CUDA only), complete once `done` has fired."""
    done: torch.cuda.Event | None = None
    spec: Any = None
    """A step that verified proposals: its spec_decode.verify.VerifyRows (batch and sampled ids are per row)."""
    logits: torch.Tensor | None = None
    """Set while the step's sampling waits for its grammar masks (launched with sample=False)."""
    masked_draw: tuple[Any, int] | None = None
    """With `logits`, when the padded decode path computed them (a graph, or eagerly) and its masked draw can
    sample the batch: the DecodeRunner and the bucket (runner/decode_runner.py `masked_sampled`)."""
    prompt: PendingPromptLogprobs | None = None
    """Prompt logprobs the step computed (runner/prompt_logprobs.py), on the device until collected."""

    @classmethod
    def start(
        cls, states: list[CachedRequestState], batch: list[SamplingInput], sampled: SampledTokens, spec: Any = None
    ) -> StepHandle:
        """The handle of a step whose ids were just sampled, their copy to the host already started."""
        return cls(states, batch, sampled, *start_copy(sampled), spec=spec)

    def wait(self) -> list[int]:
        if self.sampled is None:
            return []
        if self.done is None:
            return self.sampled.checked_ids().tolist()
        self.done.synchronize()
        return self.host.tolist()  # type: ignore[union-attr]

    def pending_for_next(self) -> PendingTokens:
        """Where the next step finds each of this step's tokens while they are not on the host."""
        return {s.request_id: (s, i) for i, s in enumerate(self.states)}
