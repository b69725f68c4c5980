"""Prompt logprobs: each prompt token's log-probability given the tokens before it, from prefill logits.

A step's forward leaves one hidden row per scheduled token; the row of prompt position p holds the
distribution of token p + 1. For the requests that asked (SamplingParams.prompt_logprobs), the rows of
their chunk's positions go through the LM head a slice at a time, so a long chunk never holds more
than `SLICE_ROWS` rows of vocabulary-wide logits; on the device each slice keeps only the prompt
token's logprob, its rank and the top k, and those small tensors reach the host when the step is
collected. Steps without such a request do none of this (`InputBatch.prompt_logprob_ids` is empty).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.device import to_device
from model_optimizer.runtime.sampler_output import PromptLogprobs

SLICE_ROWS = 256
"""Rows of logits (float32, vocabulary wide) alive at once while computing prompt logprobs."""


@dataclass
class PromptJob:
    """The prompt positions of one request that this step computes, and where their rows are."""

    request_id: str
    start: int
    """Prompt index of the first token scored (its logits are on the row before it)."""
    first_row: int
    """Row of the flat batch holding the logits of token `start`."""
    token_ids: list[int]
    """The prompt tokens scored: start, start + 1, ..."""
    num_top: int


def plan(
    request_id: str, prompt_token_ids: list[int], start: int, end: int, first_row: int, num_top: int
) -> PromptJob | None:
    """The job of a request computing positions [start, end) this step, or None when they score no token
    (the last prompt position predicts the first output token, not a prompt token)."""
    stop = min(end, len(prompt_token_ids) - 1)
    if stop <= start:
        return None
    return PromptJob(request_id, start + 1, first_row, prompt_token_ids[start + 1 : stop + 1], num_top)


@dataclass
class PendingPromptLogprobs:
    """Each job's small result tensors, still on the device until the step is collected."""

    jobs: list[PromptJob]
    chosen: list[torch.Tensor]
    ranks: list[torch.Tensor]
    top_values: list[torch.Tensor]
    top_ids: list[torch.Tensor]

    def to_host(self) -> dict[str, PromptLogprobs]:
        out = {}
        for job, chosen, ranks, values, ids in zip(self.jobs, self.chosen, self.ranks, self.top_values, self.top_ids):
            out[job.request_id] = PromptLogprobs(
                job.start,
                job.token_ids,
                chosen.tolist(),
                ranks.tolist(),
                job.num_top,
                ids.flatten().tolist(),
                values.flatten().tolist(),
            )
        return out


@torch.inference_mode()
def compute(model: torch.nn.Module, hidden: torch.Tensor, jobs: list[PromptJob]) -> PendingPromptLogprobs:
    """Queue the prompt logprobs of `jobs` from the step's hidden rows (num_tokens, hidden_size)."""
    pending = PendingPromptLogprobs(jobs, [], [], [], [])
    for job in jobs:
        targets = to_device(job.token_ids, hidden.device, torch.int64)  # (n,)
        parts: list[list[torch.Tensor]] = [[], [], [], []]
        for a in range(0, len(job.token_ids), SLICE_ROWS):
            b = min(a + SLICE_ROWS, len(job.token_ids))
            rows = hidden[job.first_row + a : job.first_row + b]
            logprobs = torch.log_softmax(model.compute_logits(rows).float(), dim=-1)  # (b - a, vocab)
            chosen = logprobs.gather(1, targets[a:b, None])  # (b - a, 1)
            parts[0].append(chosen.squeeze(1))
            parts[1].append((logprobs > chosen).sum(dim=1) + 1)  # 1 + tokens strictly more likely
            top = logprobs.topk(job.num_top, dim=1)  # sorted, most likely first; k = 0 gives (b - a, 0)
            parts[2].append(top.values)
            parts[3].append(top.indices)
        for results, tensors in zip((pending.chosen, pending.ranks, pending.top_values, pending.top_ids), parts):
            results.append(torch.cat(tensors))
    return pending
