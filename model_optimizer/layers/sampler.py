"""Sampler: logits of the last position of each request -> next token (and logprobs).

Order as in transformers' logits processors: penalties, temperature, top-k, top-p, min-p.
Logprobs are those of the raw model distribution, as vLLM and the OpenAI API report them.
A seeded request draws its noise from a generator seeded by (seed, output position), so its
tokens do not depend on what else is in the batch or on preemption.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.engine.request import Logprob
from model_optimizer.sampling_params import SamplingParams


@dataclass
class SamplingInput:
    """One request's view for sampling: its settings and token history."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0) -> None:
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, logits: torch.Tensor, batch: list[SamplingInput]) -> list[tuple[int, Logprob | None]]:
        logits = logits.float()  # (num_reqs, vocab)
        want_logprobs = any(b.params.logprobs is not None for b in batch)
        raw_logprobs = torch.log_softmax(logits, dim=-1) if want_logprobs else None
        logits = self._apply_penalties(logits, batch)
        token_ids = self._choose(logits, batch).tolist()  # one host sync per step
        results = []
        for i, (token_id, item) in enumerate(zip(token_ids, batch)):
            logprob = None
            if raw_logprobs is not None and item.params.logprobs is not None:
                logprob = _logprob(raw_logprobs[i], token_id, item.params.logprobs)
            results.append((token_id, logprob))
        return results

    def _apply_penalties(self, logits: torch.Tensor, batch: list[SamplingInput]) -> torch.Tensor:
        for i, item in enumerate(batch):
            p = item.params
            if p.repetition_penalty != 1.0:
                seen = torch.tensor(sorted(set(item.prompt_token_ids) | set(item.output_token_ids)), device=logits.device)
                row = logits[i, seen]
                logits[i, seen] = torch.where(row > 0, row / p.repetition_penalty, row * p.repetition_penalty)
            if (p.presence_penalty or p.frequency_penalty) and item.output_token_ids:
                out = torch.tensor(item.output_token_ids, device=logits.device)
                counts = torch.bincount(out, minlength=logits.shape[-1]).float()
                logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).float()
        return logits

    def _choose(self, logits: torch.Tensor, batch: list[SamplingInput]) -> torch.Tensor:
        chosen = logits.argmax(dim=-1)
        sampled_rows = [i for i, b in enumerate(batch) if not b.params.greedy]
        if not sampled_rows:
            return chosen
        params = [batch[i].params for i in sampled_rows]
        rows = torch.tensor(sampled_rows, device=logits.device)
        probs = _filtered_probs(logits[rows], params)
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for j, i in enumerate(sampled_rows):
            seed = batch[i].params.seed
            if seed is not None:
                position = len(batch[i].output_token_ids)
                generator = torch.Generator(device=logits.device).manual_seed(hash((seed, position)) & (2**63 - 1))
                noise[j].exponential_(generator=generator)
        # argmax(p / E) with E ~ Exp(1) draws from p (the exponential race), without a CPU sync
        chosen[rows] = (probs / noise).argmax(dim=-1)
        return chosen


def _filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p masks, as probabilities. Decided on the host: no syncs."""
    device = logits.device
    vocab = logits.shape[-1]
    logits = logits / torch.tensor([p.temperature for p in params], device=device)[:, None]
    ks = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
    if any(ks):
        top = logits.topk(max(ks), dim=-1).values  # (rows, largest k)
        kth = top.gather(1, torch.tensor([max(k, 1) - 1 for k in ks], device=device)[:, None])
        limited = torch.tensor([k > 0 for k in ks], device=device)[:, None]
        logits = logits.masked_fill(limited & (logits < kth), float("-inf"))
    if any(p.top_p < 1.0 for p in params):
        top_p = torch.tensor([p.top_p for p in params], device=device)[:, None]
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p  # keep until the mass reaches top_p
        logits = logits.masked_fill(torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted), float("-inf"))
    probs = logits.softmax(dim=-1)
    if any(p.min_p > 0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=device)[:, None]
        probs = probs.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
    return probs


def _logprob(row: torch.Tensor, token_id: int, k: int) -> Logprob:
    chosen = row[token_id].item()
    rank = int((row > chosen).sum().item()) + 1
    top = {}
    if k:
        values, ids = row.topk(k)
        top = dict(zip(ids.tolist(), values.tolist()))
    return Logprob(token_id=token_id, logprob=chosen, rank=rank, top=top)
