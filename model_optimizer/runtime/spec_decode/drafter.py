"""Drafter: a smaller model with the target's vocabulary that proposes tokens inside the target's step.

It lives in the target's ModelRunner and shares its InputBatch: the same requests, block tables and
step buffer, so its decode steps replay CUDA graphs captured on the very buffers the target's use (one
model runs at a time). Its KV cache has as many blocks as the target's and follows the target's block
tables: a slot holds the target's KV in one cache and the draft's in the other.

The draft computes lazily, only when a request speculates: `computed` says how many of a request's
tokens the draft has in its cache. A step that verifies k proposals first runs the draft over the
request's tokens it has not seen (the whole prompt the first time, then the 1 + accepted tokens of
the last step; long catch-ups are cut to the step buffer), which samples the first proposal, then
k - 1 one-token steps, each reading the previous proposal on the device. Only real tokens count as
computed: the proposals' KV is overwritten by the next catch-up. A request new to the runner (first
seen, or recomputed after a preemption) starts at 0, even over prefix-cached blocks: whether the
draft ever computed those is not known. Nothing waits for the device.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.hub import resolve_model
from model_optimizer.runtime.layers.attention import AttentionMetadata, bind_kv_caches, kv_cache_shape
from model_optimizer.runtime.layers.sampler import SampledTokens, Sampler, reduce_logprobs
from model_optimizer.runtime.models.loader import load_model
from model_optimizer.runtime.runner.decode_runner import DecodeRunner
from model_optimizer.runtime.runner.input_batch import CachedRequestState, InputBatch
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig
from model_optimizer.runtime.spec_decode.rejection import apply_rejection, draft_sample, verified_by_rejection
from model_optimizer.runtime.spec_decode.verify import VerifyRows, proposal_rows, rejection_batch

log = logging.getLogger(__name__)


@dataclass
class Proposal:
    """A draft model's proposals for one step, on the device."""

    request_ids: list[str]
    """The requests that verify proposals, in batch order."""
    num_draft: list[int]
    draft_ids: torch.Tensor
    """(requests, K) int64; K the most any request proposes; past a request's own count, 0."""
    draft_probs: dict[int, torch.Tensor]
    """Request index -> q of its proposals (k, vocab), for requests that sample (not greedy)."""

    def write_into(self, out: SchedulerOutput, token_ids: torch.Tensor) -> None:
        """Put the proposals into the step's flat token ids, after each request's last token (on the device)."""
        rows, sources = proposal_rows(out)
        K = self.draft_ids.shape[1]
        flat = torch.tensor([i * K + j for i, j in sources], device=token_ids.device)
        token_ids[torch.tensor(rows, device=token_ids.device)] = self.draft_ids.view(-1)[flat]


class Drafter:
    def __init__(
        self, spec: SpeculativeConfig, config: EngineConfig, device: torch.device, vocab_size: int, max_model_len: int
    ) -> None:
        """`max_model_len`: the length the engine serves (the target's), by which a longrope draft picks its factor
        list as the target does (layers/longrope_rotary.py), not by its own context."""
        folder = resolve_model(spec.model or "", what="draft model")  # a folder, or a Hub id as the target takes
        if not (folder / "config.json").is_file():
            raise ValueError(f"speculative_config: draft model folder {folder} has no config.json")
        load_format = "dummy" if config.load_format == "dummy" else "auto"  # benchmarks: dummy target, dummy draft
        self.model = load_model(folder, config.dtype, device, load_format, max_model_len=max_model_len)
        self.args = self.model.args
        if self.args.vocab_size != vocab_size:
            raise ValueError(
                f"speculative_config: the draft model's vocabulary ({self.args.vocab_size} tokens) differs from the "
                f"target's ({vocab_size}); a draft model must share the target's tokenizer and vocabulary size"
            )
        self.config, self.device = config, device
        self.dtype = next(self.model.parameters()).dtype
        self.sampler = Sampler(device, config.seed + 1)
        """Draws the proposals: a seeded request's as the target's sampler draws them (rejection.py), the others'
        from its generator, which also draws the rejection rule's noise."""
        self.computed: dict[str, int] = {}
        """Request id -> tokens whose KV the draft has (see the module docstring)."""
        self.batch: InputBatch | None = None
        self.padded_runners: list[DecodeRunner] = []
        """CUDA: its decode steps (1 token per sequence) and uniform catch-ups (1 + k), graphed."""
        self.k = spec.num_speculative_tokens
        self.kv_caches: list[torch.Tensor] = []

    def bytes_per_block(self) -> int:
        """The draft's KV-cache bytes of one block over all its layers, in its own cache layout (kv_cache_shape:
        K and V planes, or a latent-attention model's one row per token)."""
        element = torch.tensor([], dtype=self.dtype).element_size()
        return self.args.num_layers * math.prod(kv_cache_shape(self.model, 1, self.config.block_size)) * element

    def start(self, batch: InputBatch, num_blocks: int, max_model_len: int) -> None:
        """Allocate the draft's KV cache (as many blocks as the target's) and, on CUDA, capture its decode graphs
        on `batch`, the target's input batch."""
        if self.args.max_position_embeddings < max_model_len:
            raise ValueError(
                f"speculative_config: the draft model handles {self.args.max_position_embeddings} positions, fewer "
                f"than max_model_len {max_model_len}; lower --max-model-len"
            )
        shape = kv_cache_shape(self.model, num_blocks, self.config.block_size)  # the draft's own layout
        self.kv_caches = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.args.num_layers)]
        bind_kv_caches(self.model, self.kv_caches)
        self.batch = batch
        if self.device.type == "cuda":
            self._warm_up(max_model_len)
            eager = self.config.enforce_eager
            for query_len in (1, self.k + 1):
                runner = DecodeRunner(self.model, batch, self.config.max_num_seqs, shape[3], not eager, query_len)
                if not eager:
                    runner.capture()
                self.padded_runners.append(runner)

    @torch.inference_mode()
    def _warm_up(self, max_model_len: int) -> None:
        """Compile the prefill kernels of the catch-up shapes now, not inside the first speculative step."""
        bs, length = self.config.block_size, 2
        while length <= min(128, max_model_len):
            caches = [cache[:, : -(-length // bs)] for cache in self.kv_caches]
            meta = AttentionMetadata.for_prefill([length], bs, caches, self.device)
            tokens = torch.ones(length, dtype=torch.int64, device=self.device)
            self.model(tokens, torch.arange(length, device=self.device), meta)
            length *= 2
        for cache in self.kv_caches:
            cache.zero_()

    def forget(self, out: SchedulerOutput) -> None:
        """Requests finished or preempted, and new ones (first seen, or back after a preemption), start over."""
        for request_id in out.finished_request_ids:
            self.computed.pop(request_id, None)
        for new in out.new_requests:
            self.computed[new.request_id] = 0

    def verify(
        self, sampled: SampledTokens, logits: torch.Tensor, rows: VerifyRows, proposal: Proposal
    ) -> SampledTokens:
        """The target's draws for a step that verified `proposal`, with the rows of requests whose proposals
        were sampled from q rewritten by rejection sampling (their logprobs follow the new tokens)."""
        rows.set_drafts(proposal.draft_ids)
        batch = rejection_batch(rows, proposal.draft_ids, proposal.draft_probs)
        if batch is None:
            return sampled
        token_ids = apply_rejection(sampled.token_ids, logits, batch, self.sampler.generator)
        logprobs = sampled.logprobs
        if logprobs is not None:
            k = max(b.params.logprobs for b in rows.batch if b.params.logprobs is not None)
            logprobs = reduce_logprobs(torch.log_softmax(logits.float(), dim=-1), token_ids, k)
        return SampledTokens(token_ids, sampled.finite, logprobs)

    @torch.inference_mode()
    def propose(self, out: SchedulerOutput) -> Proposal:
        """Run the draft for every request of `out` that verifies proposals (see the module docstring)."""
        assert self.batch is not None
        ids = [rid for rid in out.num_scheduled_tokens if rid in out.spec_token_ids]
        states = [self.batch.requests[rid] for rid in ids]
        ks = [len(out.spec_token_ids[rid]) for rid in ids]
        saved = [(s, s.num_computed_tokens, len(s.output_token_ids)) for s in states]
        try:
            first = self._catch_up(states)
            return self._decode(ids, states, ks, first)
        finally:
            for state, num_computed, num_output in saved:  # the target's view of them, as before
                state.num_computed_tokens = num_computed
                del state.output_token_ids[num_output:]
            for state in states:
                self.computed[state.request_id] = state.num_tokens

    def _catch_up(self, states: list[CachedRequestState]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Run the draft over each request's tokens it has not computed; per request, the draw after its last
        token and q there (None for a greedy request)."""
        limit = self.batch.max_num_tokens  # type: ignore[union-attr]
        pending = [(s, self._catch_up_start(s), s.num_tokens) for s in states]
        draws: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        while pending:
            chunk, rest, budget = [], [], limit
            for state, start, end in pending:
                n = min(end - start, budget)
                if n > 0:
                    chunk.append((state, start, start + n))
                    budget -= n
                if start + n < end:
                    rest.append((state, start + n, end))
            draws.update(self._forward_chunk(chunk))
            pending = rest
        return [draws[s.request_id] for s in states]

    def _catch_up_start(self, state: CachedRequestState) -> int:
        """Where the draft resumes: after what it computed, or earlier, at 1 + k tokens from the end, when that
        recomputes only tokens it has (same tokens, same KV): then every request of a steady step catches up on
        1 + k tokens, a shape its graphs replay."""
        computed, uniform = self.computed.get(state.request_id, 0), state.num_tokens - self.k - 1
        return uniform if 0 <= uniform <= computed else computed

    def _forward_chunk(self, chunk: list[tuple[CachedRequestState, int, int]]) -> dict:
        """One forward over tokens [start, end) of each request; the draft's draw for those that reach their end."""
        sampling = {s.request_id for s, _, end in chunk if end == s.num_tokens}
        out = SchedulerOutput(
            num_scheduled_tokens={s.request_id: end - start for s, start, end in chunk}, sampling_request_ids=sampling
        )
        for state, start, _ in chunk:
            state.num_computed_tokens = start
        logits, states = self._forward(out, {}, None)
        if logits is None:
            return {}
        batch = [s.sampling_input(len(s.output_token_ids)) for s in states]
        drawn, q = draft_sample(logits, batch, self.sampler)
        # q only for requests verified by rejection: a greedy or seeded one's row is unused (all zeros), and would
        # make its verification a rejection sampling against nothing when it shares a batch with such a request
        return {
            s.request_id: (drawn[i], q[i] if q is not None and verified_by_rejection(b.params) else None)
            for i, (s, b) in enumerate(zip(states, batch))
        }

    def _forward(
        self, out: SchedulerOutput, pending: dict, previous: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, list[CachedRequestState]]:
        """The draft's logits at the sampling requests' last rows (None if none samples), and those requests."""
        inputs = self.batch.prepare(out, pending)  # type: ignore[union-attr]
        if previous is not None and len(inputs.pending_dst):
            inputs.token_ids[inputs.pending_dst] = previous[inputs.pending_src]
        padded = next((r for r in self.padded_runners if r.can_run(inputs)), None)
        if padded is not None:
            hidden = padded.run(inputs)
        else:
            hidden = self.model(inputs.token_ids, inputs.positions, inputs.attn)
        if not inputs.sample_states:
            return None, []
        return self.model.compute_logits(hidden[inputs.sample_rows]), inputs.sample_states

    def _decode(self, ids: list[str], states: list[CachedRequestState], ks: list[int], first: list) -> Proposal:
        """k - 1 one-token steps after the catch-up; each request stops at its own k. Step j reads proposal j
        (made by the step before, still on the device) at position N + j - 1 and draws proposal j + 1."""
        K = max(ks)
        draft_ids = torch.zeros(len(ids), K, dtype=torch.int64, device=self.device)
        draft_ids[:, 0] = torch.stack([drawn for drawn, _ in first])
        probs = {i: [q] for i, (_, q) in enumerate(first) if q is not None}
        for j in range(1, K):
            active = [i for i, k in enumerate(ks) if k > j]
            if not active:
                break
            for i in active:
                states[i].num_computed_tokens = states[i].num_tokens  # its next token is proposal j, pending
            out = SchedulerOutput(
                num_scheduled_tokens={ids[i]: 1 for i in active}, sampling_request_ids={ids[i] for i in active}
            )
            logits, sampled_states = self._forward(out, {ids[i]: (states[i], i) for i in active}, draft_ids[:, j - 1])
            batch = [s.sampling_input(len(s.output_token_ids) + 1) for s in sampled_states]
            drawn, q = draft_sample(logits, batch, self.sampler)  # type: ignore[arg-type]
            row_of = {s.request_id: r for r, s in enumerate(sampled_states)}
            rows = [row_of[ids[i]] for i in active]
            draft_ids[torch.tensor(active, device=self.device), j] = drawn[torch.tensor(rows, device=self.device)]
            for i, r in zip(active, rows):
                states[i].output_token_ids.append(0)  # proposal j's place, so the next step's token is pending
                if i in probs and q is not None:
                    probs[i].append(q[r])
        return Proposal(ids, ks, draft_ids, {i: torch.stack(qs) for i, qs in probs.items()})
