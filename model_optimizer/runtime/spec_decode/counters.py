"""Acceptance counters, named after vLLM's metrics (`vllm:spec_decode_*`): how many proposals were made
and kept. Pure Python: the scheduler counts, EngineStats carries them to the frontend."""

from __future__ import annotations

from dataclasses import dataclass, field

DRAFT_TOKEN = -1
"""Stands in SchedulerOutput.spec_token_ids for a draft model's proposals, which the runner's drafter
makes on the device inside the step: the scheduler only needs their number."""


@dataclass
class SpecCounters:
    num_drafts: int = 0
    """Request-steps that verified at least one proposal."""
    num_draft_tokens: int = 0
    """Proposed tokens verified."""
    num_accepted_tokens: int = 0
    """Proposed tokens the target accepted (the token of its own each such step yields is not counted)."""
    accepted_per_pos: list[int] = field(default_factory=list)
    """Accepted proposals by position in the proposal (index 0: the first proposed token)."""

    def add(self, num_draft: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_draft:
            self.accepted_per_pos.extend([0] * (num_draft - len(self.accepted_per_pos)))
        for pos in range(num_accepted):
            self.accepted_per_pos[pos] += 1
