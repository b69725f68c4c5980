"""Sampler: logits of the last position of each request -> next token (and logprobs).

Order as in transformers' logits processors: penalties, then logit_bias, allowed and barred tokens
(vLLM's allowed_token_ids and bad words), temperature, top-k, top-p, min-p; those before temperature
are layers/logits_rules.py.
Logprobs are those of the raw model distribution, as vLLM and the OpenAI API report them. A row
constrained by a grammar (runtime/structured) samples among the tokens its mask allows, and its
logprobs are those of the model's distribution over the allowed tokens (the mask applied before the
log-softmax, and before penalties, temperature, top-k/p, min-p), as vLLM reports them: its
top_logprobs never list a token the grammar forbids.
A seeded request draws its noise from a generator seeded by (seed, output position), so its
tokens do not depend on what else is in the batch or on preemption.

On CUDA, batches of greedy and temperature-only requests (no penalties, top-k, top-p or min-p)
take one Triton kernel (kernels/sampling.py) that reads the logits once; the same distribution,
from a different random stream than the CPU path.

Each row is also checked for NaN/inf logits on the device (inside that kernel, or by one sum on
the torch path); the flag travels to the host with the ids (`SampledTokens.checked_ids`), so the
engine can fail that request alone without a host sync of its own.

Logprobs are reduced on the device too, inside `sample`: the sampled token's logprob, its rank and
the top-k (k the largest any request of the batch asked for) are small tensors that the step handle
copies to pinned host memory together with the ids. Reading them from the (rows, vocab) log-softmax
after the ids arrived cost one `.item()` per request while the next step was already queued, and
each of those waited for the whole queue: a request with logprobs serialized the async pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.device import to_device
from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.layers.logits_rules import apply_penalties, apply_token_rules
from model_optimizer.runtime.layers.token_mask import TokenMask, apply_token_mask, forbidden_tokens
from model_optimizer.runtime.sampler_output import NONFINITE_TOKEN, Logprob
from model_optimizer.runtime.sampling_params import SamplingParams


@dataclass
class SamplingInput:
    """One request's view for sampling: its settings and token history."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    position: int | None = None
    """Index among the outputs of the token being sampled; None: len(output_token_ids)."""

    @property
    def output_index(self) -> int:
        return len(self.output_token_ids) if self.position is None else self.position


@dataclass
class SampledTokens:
    """What one sampling call drew, still on the device."""

    token_ids: torch.Tensor
    """(rows,) int64: always vocabulary ids (meaningless ones for a non-finite row), so the next
    step may read them as its inputs."""
    finite: torch.Tensor
    """(rows,) bool: False where the row's logits held a NaN or an inf."""
    logprobs: SampledLogprobs | None = None
    """The sampled tokens' logprobs, ranks and top-k, when a request asks for logprobs."""

    checked: torch.Tensor | None = None
    """`checked_ids()` when the sampling kernel wrote it beside the ids (no launch of its own)."""

    def checked_ids(self) -> torch.Tensor:
        """The ids with NONFINITE_TOKEN in rows whose logits were not finite: what the host reads."""
        if self.checked is not None:
            return self.checked
        return torch.where(self.finite, self.token_ids, NONFINITE_TOKEN)


@dataclass
class SampledLogprobs:
    """Per row: the sampled token's logprob and rank, and the batch's top-k, reduced on the device.

    `host` holds pinned copies once the step handle has started them (CUDA); `Sampler.results`
    reads those after the ids' copy event fired, so building Logprob objects waits for nothing."""

    chosen: torch.Tensor
    """(rows,) float32: log-softmax of the raw logits at the sampled id."""
    rank: torch.Tensor
    """(rows,) int64: 1 + how many tokens have a strictly larger logprob."""
    top_values: torch.Tensor
    """(rows, k) float32, largest first; k is the most any request of the batch asked for (may be 0)."""
    top_ids: torch.Tensor
    """(rows, k) int64: the ids of `top_values`."""
    host: tuple[torch.Tensor, ...] | None = None
    """Pinned host copies of (chosen, rank, top_values, top_ids), complete with the ids' copy."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.chosen, self.rank, self.top_values, self.top_ids

    def start_copy(self) -> None:
        """Queue the copies to pinned host memory on the current stream (the caller records the event)."""
        copies = []
        for tensor in self.tensors():
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            copies.append(host)
        self.host = tuple(copies)

    def to_lists(self) -> tuple[list, list, list, list]:
        """Host lists; from the pinned copies when started, else straight from the tensors (CPU: no wait)."""
        chosen, rank, top_values, top_ids = self.host if self.host is not None else self.tensors()
        return chosen.tolist(), rank.tolist(), top_values.tolist(), top_ids.tolist()


class Sampler:
    def __init__(self, device: torch.device, seed: int = 0, fused: bool = True) -> None:
        """`fused` False samples every batch with torch, never with the Triton kernel (tests compare the two)."""
        self.device = device
        self.fused = fused
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._row_tensors: dict[tuple, torch.Tensor] = {}
        """Per-row inputs of the fused kernel by value (inverse temperatures; zero seeds), on the device: a
        batch whose rows sample as an earlier one's copies nothing from the host. At batch 1 the copy and
        the random draw were a tenth of a small model's host step (H200 profile, README)."""

    def __call__(
        self, logits: torch.Tensor, batch: list[SamplingInput], mask: TokenMask | None = None
    ) -> list[tuple[int, Logprob | None]]:
        """Sample and wait for the result (one host sync); a non-finite row gives NONFINITE_TOKEN."""
        sampled = self.sample(logits, batch, mask)
        return self.results(sampled.checked_ids().tolist(), sampled.logprobs, batch)

    def sample(self, logits: torch.Tensor, batch: list[SamplingInput], mask: TokenMask | None = None) -> SampledTokens:
        """Token ids (num_reqs,) int64 on the logits' device, their finite flags, and raw logprobs when a
        request asks for them. `mask` restricts the rows a grammar constrains to the tokens it allows.

        Queues device work only: nothing here waits for the device."""
        wanted = [b.params.logprobs for b in batch if b.params.logprobs is not None]
        fused = self.fused and _can_fuse(logits) and all(plain(b) for b in batch)
        scores = logits.float() if wanted or not fused else None  # (num_reqs, vocab); one copy for both uses
        # the torch forms of the mask, unpacked once for the logprobs and the sampling both
        forbidden = forbidden_tokens(mask, logits.shape[-1]) if mask is not None and scores is not None else None
        raw_logprobs = None
        if wanted:
            raw_logprobs = torch.log_softmax(
                scores if forbidden is None else apply_token_mask(scores, forbidden), dim=-1
            )
        checked = None
        if fused:
            checked = torch.empty(len(batch), dtype=torch.int64, device=logits.device)
            token_ids, finite = self._choose_fused(logits, batch, mask, checked)
        else:
            finite = scores.sum(dim=-1).isfinite()  # any NaN or inf makes the sum NaN or inf
            if forbidden is not None:  # after the check: the -inf of a forbidden token is no fault of the model
                scores = apply_token_mask(scores, forbidden)
            scores = apply_token_rules(apply_penalties(scores, batch), batch)
            token_ids = self._choose(scores, batch)
        logprobs = None if raw_logprobs is None else reduce_logprobs(raw_logprobs, token_ids, max(wanted))
        return SampledTokens(token_ids, finite, logprobs, checked)

    def _choose_fused(
        self,
        logits: torch.Tensor,
        batch: list[SamplingInput],
        mask: TokenMask | None = None,
        checked: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Temperature and sampling in one pass over the logits (kernels/sampling.py): ids and finite flags;
        `checked`, when given, receives the ids with NONFINITE_TOKEN where not finite."""
        gumbel_sample = triton_kernel("sampling", "gumbel_sample_checked")
        device = logits.device
        inverse = inverse_temperatures(batch)
        inv_temperatures = self.row_tensor(inverse, torch.float32)
        if not any(inverse):  # every row greedy: the noise is not used, so no draw (and no launch) for it
            zeros = self.row_tensor((0,) * len(batch), torch.int64)
            return gumbel_sample(logits, inv_temperatures, zeros, _tuple(mask), checked)
        seeds = torch.randint(0, 2**62, (len(batch),), generator=self.generator, device=device)
        seeded = [i for i, b in enumerate(batch) if b.params.seed is not None and not b.params.greedy]
        if seeded:
            rows = to_device(seeded, device, torch.int64)
            own = [_row_seed(batch[i].params.seed, batch[i].output_index) for i in seeded]  # type: ignore[arg-type]
            seeds[rows] = to_device(own, device, torch.int64)
        return gumbel_sample(logits, inv_temperatures, seeds, _tuple(mask), checked)

    def row_tensor(self, values: tuple, dtype: torch.dtype) -> torch.Tensor:
        """`values` as a `dtype` tensor on the device, cached by both (0 and 0.0 hash alike: the dtype keeps
        them apart). The kernel only reads these, so one tensor serves every step that asks for the same."""
        key = (dtype, values)
        found = self._row_tensors.get(key)
        if found is None:
            if len(self._row_tensors) >= ROW_TENSORS_KEPT:
                self._row_tensors.clear()  # batch compositions churn: start over rather than grow
            found = self._row_tensors[key] = to_device(list(values), self.device, dtype)
        return found

    @staticmethod
    def results(
        token_ids: list[int], logprobs: SampledLogprobs | None, batch: list[SamplingInput]
    ) -> list[tuple[int, Logprob | None]]:
        """Pair each sampled id with its logprob entry, once the ids (and so the logprobs) are on the host."""
        if logprobs is None:
            return [(token_id, None) for token_id in token_ids]
        chosen, ranks, top_values, top_ids = logprobs.to_lists()
        results = []
        for i, (token_id, item) in enumerate(zip(token_ids, batch)):
            k = item.params.logprobs
            if k is None or token_id == NONFINITE_TOKEN:
                results.append((token_id, None))
                continue
            values = top_values[i]
            if len(values) > k:
                values = values[:k]
            while values and values[-1] == _NEG_INF:  # probability 0 (its grammar forbids it): no alternative
                values = values[:-1]  # (most likely first: only the last ones can be)
            results.append((token_id, Logprob(token_id, chosen[i], ranks[i], dict(zip(top_ids[i], values)))))
        return results

    def _choose(self, logits: torch.Tensor, batch: list[SamplingInput]) -> torch.Tensor:
        sampled_rows = [i for i, b in enumerate(batch) if not b.params.greedy]
        if not sampled_rows:
            return logits.argmax(dim=-1)
        params = [batch[i].params for i in sampled_rows]
        every_row = len(sampled_rows) == len(batch)
        rows = None if every_row else to_device(sampled_rows, logits.device, torch.int64)
        probs = _filtered_probs(logits if every_row else logits[rows], params)
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for j, i in enumerate(sampled_rows):
            seed = batch[i].params.seed
            if seed is not None:
                generator = torch.Generator(device=logits.device).manual_seed(_row_seed(seed, batch[i].output_index))
                noise[j].exponential_(generator=generator)
        # argmax(p / E) with E ~ Exp(1) draws from p (the exponential race), without a CPU sync
        drawn = (probs / noise).argmax(dim=-1)
        if every_row:
            return drawn
        chosen = logits.argmax(dim=-1)
        chosen[rows] = drawn
        return chosen


_NEG_INF = float("-inf")


def _row_seed(seed: int, position: int) -> int:
    """The noise seed of a seeded request's token at one output position: independent of the batch."""
    return hash((seed, position)) & (2**63 - 1)


ROW_TENSORS_KEPT = 256
"""Distinct per-row tensors the fused sampler keeps on the device before it starts over."""


def _tuple(mask: TokenMask | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    return mask.as_tuple() if mask is not None else None


def plain(item: SamplingInput) -> bool:
    """Greedy or temperature-only sampling of this token: what the fused kernel does."""
    p = item.params
    return not p.adjusts_logits_at(item.output_index) and p.top_k <= 0 and p.top_p >= 1.0 and p.min_p <= 0


def inverse_temperatures(batch: list[SamplingInput]) -> tuple[float, ...]:
    """Each row's 1 / temperature as the fused kernel reads it: 0 for a greedy row (no noise)."""
    return tuple(0.0 if b.params.greedy else 1.0 / b.params.temperature for b in batch)


def _can_fuse(logits: torch.Tensor) -> bool:
    """Whether kernels.sampling can run on these logits: Triton on CUDA."""
    return aot.on_gpu(logits) and triton_kernel("sampling", "gumbel_sample") is not None


def _filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p masks, as probabilities. Decided on the host: no syncs."""
    device = logits.device
    vocab = logits.shape[-1]
    temperatures = [p.temperature for p in params]
    if len(set(temperatures)) == 1:
        logits = logits / temperatures[0]
    else:
        logits = logits / to_device(temperatures, device, torch.float32)[:, None]
    ks = [p.top_k if 0 < p.top_k < vocab else 0 for p in params]
    if any(ks):
        top = logits.topk(max(ks), dim=-1).values  # (rows, largest k)
        kth = top.gather(1, to_device([max(k, 1) - 1 for k in ks], device, torch.int64)[:, None])
        limited = to_device([k > 0 for k in ks], device, torch.bool)[:, None]
        logits = logits.masked_fill(limited & (logits < kth), float("-inf"))
    if any(p.top_p < 1.0 for p in params):
        top_p = to_device([p.top_p for p in params], device, torch.float32)[:, None]
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p  # keep until the mass reaches top_p
        logits = logits.masked_fill(torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted), float("-inf"))
    probs = logits.softmax(dim=-1)
    if any(p.min_p > 0 for p in params):
        min_p = to_device([p.min_p for p in params], device, torch.float32)[:, None]
        probs = probs.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
    return probs


def reduce_logprobs(raw_logprobs: torch.Tensor, token_ids: torch.Tensor, k: int) -> SampledLogprobs:
    """The sampled ids' logprobs and ranks and the top-k of each row, all on the device (no sync).

    `raw_logprobs` (rows, vocab) float32; `token_ids` (rows,) int64, always vocabulary ids."""
    chosen = raw_logprobs.gather(1, token_ids[:, None])  # (rows, 1)
    rank = (raw_logprobs > chosen).sum(dim=-1) + 1  # ties share the better rank
    top_values, top_ids = raw_logprobs.topk(k, dim=-1)  # (rows, k), largest first
    return SampledLogprobs(chosen[:, 0], rank, top_values, top_ids)
