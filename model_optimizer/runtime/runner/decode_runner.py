"""Decode-only batches on the GPU: padded to a batch-size bucket, replayed from CUDA graphs.

A decode step of a small model is hundreds of tiny kernels, and launching each from Python costs
far more host time than replaying it from a graph (README "How it is built"). The input batch
pads a decode batch to its bucket itself (padded tokens write to slot -1, which the store skips)
and writes it straight into the step buffer at the addresses the bucket's graph was captured on
(runner/input_batch.py), so a step is one copy in, one gather of its block-table rows and one
replay. With `enforce_eager` the same padded views run without graphs, so both modes compute
exactly the same thing.

Buckets: 1, 2, 4, 8, then every 16 up to 64, then every 32 (14 graphs for 256 sequences, not 20).
Padding costs rows, not kernels. Small batches keep fine buckets; above 64 the matrix products
already run in tiles of 64-128 rows, so a bucket 32 wide should add little work, and padded rows
only attend to one slot. (Reasoning, not yet a measurement: decode_latency.py at a batch just
past a bucket, e.g. 65 or 97, against the old buckets would confirm it on a GPU.)
Capture: largest bucket first, so smaller graphs reuse its memory pool. The first capture gets two
warm-up forwards (they compile the Triton and fused kernels and create the library handles); every
later bucket one, which still compiles whatever kernel variant its shape needs (split-KV count)
before capture. Before: 20 buckets x (2 warm-ups + 1 capture) = 60 forwards; now 14 x 2 + 1 = 29
(the capture times before and after: README "Start-up"). `capture_seconds` and the log line give
the time. Lazy capture on first use was not chosen: a cold bucket would stall a
live decode step by a kernel compilation (seconds) in the middle of serving.

With a `GraphSampling` (runner/graph_sampling.py) each graph also holds the LM head over the bucket's
rows and the fused sampling kernel: the step's logits and, for plain batches, its tokens.
A batch constrained by grammar masks draws from a second graph of the bucket's own (`masked_sampled`),
captured lazily, unlike the forward's: it needs the masks' device buffer, which exists only once a
grammar is live, and its capture compiles nothing the eager masked draw would not. What it costs a
live step, once per bucket (again only if the masks' buffer is reallocated): a synchronize, the
allocator's cache emptied (torch.cuda.graph does both) and the capture of two kernels.
"""

from __future__ import annotations

import logging
import time

import torch
from torch import nn

from model_optimizer.runtime.graph_capture import capturing
from model_optimizer.runtime.layers.attention import AttentionMetadata, decode_num_splits
from model_optimizer.runtime.layers.sampler import SampledTokens
from model_optimizer.runtime.layers.token_mask import TokenMask
from model_optimizer.runtime.runner.graph_sampling import GraphSampling
from model_optimizer.runtime.runner.input_batch import InputBatch, StepInputs

log = logging.getLogger(__name__)


def bucket_sizes(max_num_seqs: int) -> list[int]:
    sizes = [1, 2, 4, 8, 16, 32, 48, 64] + list(range(96, max_num_seqs + 1, 32))
    return sorted({s for s in sizes if s <= max_num_seqs} | {max_num_seqs})


def bucket_for(num_seqs: int, sizes: list[int]) -> int:
    """The smallest bucket holding num_seqs sequences."""
    return next(s for s in sizes if s >= num_seqs)


class DecodeRunner:
    """Runs decode-only batches padded to a bucket size: replayed from CUDA graphs, or eagerly (enforce_eager).

    With `query_len` q > 1 it runs batches of q tokens per sequence instead, padded the same way: speculative
    decoding's steps that verify k = q - 1 proposals per sequence, or a draft model catching up on them."""

    def __init__(
        self,
        model: nn.Module,
        batch: InputBatch,
        max_num_seqs: int,
        num_kv_heads: int,
        use_graphs: bool = True,
        query_len: int = 1,
        sampling: GraphSampling | None = None,
    ) -> None:
        self.model = model
        self.sampling = sampling
        self.batch = batch
        self.use_graphs = use_graphs
        self.query_len = query_len
        self.sizes = [s for s in bucket_sizes(max_num_seqs) if s * query_len <= batch.max_num_tokens]
        if query_len == 1:
            batch.pad_sizes = self.sizes  # from now on the input batch pads decode batches to these
        else:
            batch.pad_query_lens = (*batch.pad_query_lens, query_len)
        self.inputs: dict[int, tuple[torch.Tensor, torch.Tensor, AttentionMetadata]] = {}
        for size in self.sizes:
            token_ids, positions, meta = batch.decode_views(size, query_len)
            if query_len == 1:
                meta.num_splits = decode_num_splits(size, num_kv_heads, batch.max_model_len, batch.device)
            self.inputs[size] = token_ids, positions, meta
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple] = {}
        """Per bucket: the hidden states and, with `sampling`, the logits and the SampledTokens."""
        self.last: tuple = ()
        """The outputs of the latest `run` (eager mode: its own; graphs: the bucket's static ones)."""
        self.capture_seconds = 0.0
        self.masked_graphs: dict[int, tuple[tuple[int, ...], torch.cuda.CUDAGraph, SampledTokens]] = {}
        """Per bucket, once a grammar-masked batch of its size was drawn: the addresses it was captured on
        (the logits', the masks'), the graph of the masked draw, and its output."""
        self._masked_pool = None
        """The memory pool the masked-draw graphs share (none of the forward graphs')."""

    @torch.inference_mode()
    def capture(self) -> None:
        start = time.perf_counter()
        pool = None
        for size in reversed(self.sizes):  # largest first, so smaller graphs reuse its memory
            token_ids, positions, meta = self.inputs[size]
            self.batch.decode_views(size, self.query_len)  # valid padding again: other buckets' views overlap these
            for _ in range(1 if pool is not None else 2):  # compile kernels and settle the allocator outside capture
                self._forward(size)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, pool):
                self.outputs[size] = self._forward(size)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize()
        self.capture_seconds = time.perf_counter() - start
        log.info(
            "captured CUDA graphs for batch sizes %s (%d tokens each) in %.2f s",
            self.sizes,
            self.query_len,
            self.capture_seconds,
        )

    def can_run(self, inputs: StepInputs) -> bool:
        """A batch of query_len tokens per sequence the input batch padded to one of these buckets."""
        q = self.query_len
        return (
            inputs.attn.max_query_len == q
            and inputs.num_padded_seqs in self.inputs
            and (q == 1 or inputs.token_ids.shape[0] == q * inputs.num_padded_seqs)
        )

    def _forward(self, size: int) -> tuple:
        """What a bucket's graph holds: the forward over its padded rows, then the logits and their draw."""
        token_ids, positions, meta = self.inputs[size]
        hidden = self.model(token_ids, positions, meta)
        return (hidden, *self.sampling(hidden)) if self.sampling is not None else (hidden,)

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Replay (or run) the bucket of a padded batch; its inputs are already where the graph reads.
        The hidden states of the batch's rows; with sampling, `sampled` has the rest."""
        size, num_rows = inputs.num_padded_seqs, inputs.num_seqs * self.query_len
        if self.use_graphs:
            self.graphs[size].replay()
            self.last = self.outputs[size]
        else:
            self.last = self._forward(size)
        return self.last[0][:num_rows]

    def sampled(self, num_rows: int) -> tuple[torch.Tensor, SampledTokens]:
        """The latest run's logits of its first `num_rows` rows and their draw (a runner with sampling)."""
        _, logits, drawn = self.last
        return logits[:num_rows], _leading(drawn, num_rows)

    def masked_sampled(self, size: int, logits: torch.Tensor, mask: TokenMask) -> SampledTokens:
        """The draw of `logits` (`sampled`'s, of a run of bucket `size`) restricted by `mask`. With graphs
        they are the bucket's static logits, so no other run of it may come in between; `mask` then holds
        a row index for every padded row (MaskStaging.fixed), and the draw replays a graph of its own,
        captured at the bucket's first masked batch (a graph needs the masks' addresses, which exist only
        once a grammar is live). Eagerly, the rows of `logits` and `mask` are the batch's.

        Why a graph: the masks arrive after the forward's graph was queued, so the draw cannot be part of it,
        and drawn eagerly (the random keys, the kernel's launch through Triton's Python launcher, its
        outputs' allocation) it cost the host of a 64-row masked step about a third of a plain step.

        The masked graphs share one memory pool, so one graph's outputs may lie where another's scratch
        does, as with the forward graphs: a draw's ids must be read (their copy to the host, the next
        step's inputs) before the next masked replay, which the engine core's order guarantees."""
        if not self.use_graphs:
            return self.sampling.draw(logits, mask)  # type: ignore[union-attr]
        padded = self.outputs[size][1]
        key = (padded.data_ptr(), mask.bitmask.data_ptr(), mask.mask_index.data_ptr(), *mask.bitmask.shape)
        captured = self.masked_graphs.get(size)
        if captured is None or captured[0] != key:
            captured = key, *self._capture_masked(padded, mask)
            self.masked_graphs[size] = captured
        _, graph, drawn = captured
        graph.replay()
        return _leading(drawn, logits.shape[0])

    def _capture_masked(self, logits: torch.Tensor, mask: TokenMask) -> tuple[torch.cuda.CUDAGraph, SampledTokens]:
        sampling = self.sampling
        sampling.draw(logits, mask, advance=False)  # type: ignore[union-attr]  # compiles the masked kernel
        graph = torch.cuda.CUDAGraph()
        with capturing(graph, self._masked_pool):  # the mask fill's threads may run on the host meanwhile
            drawn = sampling.draw(logits, mask)  # type: ignore[union-attr]
        self._masked_pool = graph.pool()
        log.info("captured the grammar-masked draw for batch size %d", logits.shape[0])
        return graph, drawn


def _leading(drawn: SampledTokens, num_rows: int) -> SampledTokens:
    """The first `num_rows` rows of a padded batch's draw."""
    checked = drawn.checked[:num_rows] if drawn.checked is not None else None
    return SampledTokens(drawn.token_ids[:num_rows], drawn.finite[:num_rows], None, checked)
