"""SchedulerConfig: the limits and policies the scheduler runs under (scheduler.py's module docstring states
how it uses them); the engine core fills it from the EngineConfig and the model's length."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SchedulerConfig:
    """What the scheduler may hand out each step, in which order, and what a preemption does with the KV."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"
    max_num_partial_prefills: int = 1
    """Long prefills that take a first chunk ahead of shorter requests each step (scheduler.py's docstring)."""
    long_prefill_token_threshold: int = 0
    """Tokens left to compute above which a prefill is long; 0: 4% of max_model_len."""
    preemption_mode: str = "recompute"
    """What a preempted request's KV becomes: dropped and recomputed, or swapped to the host KV tier."""

    def __post_init__(self) -> None:
        if self.max_num_partial_prefills < 1:
            raise ValueError(f"max_num_partial_prefills must be at least 1, got {self.max_num_partial_prefills}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(
                f"long_prefill_token_threshold must be >= 0 (0: 4% of max_model_len), "
                f"got {self.long_prefill_token_threshold}"
            )

    @property
    def long_prefill_threshold(self) -> int:
        """The threshold in tokens; no prefill is long without chunked prefill (it could not be split)."""
        if not self.enable_chunked_prefill:
            return self.max_model_len
        return self.long_prefill_token_threshold or max(1, self.max_model_len * 4 // 100)
