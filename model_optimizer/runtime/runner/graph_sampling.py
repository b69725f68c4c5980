"""Sampling inside the decode graphs: the LM head and the fused sampling kernel replay with the forward.

At batch 1 a small model's step is decided by the host (README "Where the time goes"): after the graph
replay it launched the LM head (a cuBLAS call or our GEMV) and the fused sampler through Triton's Python
launcher, about a third of the host's step. Captured into each decode graph, they cost no launch at all.

What the graph cannot know is each row's sampling settings, so it reads them from buffers of its own:
the inverse temperatures (0 for a greedy row; written only when a batch's differ from what the buffer
holds) and one noise key per row, which the graph itself advances by one each replay. Philox keyed by
(key, vocabulary index) is a fresh stream per row and step; the keys start at random draws of the
sampler's generator, so two engines with different seeds sample differently. A batch takes the graph's
tokens when every row is greedy or temperature-only, unseeded (a seeded request's noise is keyed by its
seed and output position, which the graph does not have) and asks no logprobs; any other batch samples
from the graph's logits as before, and the graph's own draw is left unread. A batch the graph would draw
but for grammar masks, which are filled while its forward runs, is drawn by `draw` with the masks, in a
graph of its own (DecodeRunner.masked_sampled).

The graph computes the logits of every padded row, so `enforce_eager` runs the same shapes (decode_runner).
"""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.kernels import triton_kernel
from model_optimizer.runtime.layers.sampler import SampledTokens, Sampler, SamplingInput, inverse_temperatures, plain
from model_optimizer.runtime.layers.token_mask import TokenMask


class GraphSampling:
    """The logits and the fused draw of a decode bucket, with the buffers a replay reads its settings from."""

    def __init__(self, model: nn.Module, sampler: Sampler, max_rows: int, device: torch.device) -> None:
        self.model = model
        self.sampler = sampler
        self.inv_temperatures = torch.zeros(max_rows, dtype=torch.float32, device=device)
        self.keys = torch.randint(0, 2**62, (max_rows,), generator=sampler.generator, device=device)
        self.written: tuple[float, ...] = (0.0,) * max_rows
        """What `inv_temperatures` holds, as the host last wrote it."""
        self.steps = 0
        """Steps whose tokens a decode graph drew."""

    def __call__(self, hidden: torch.Tensor) -> tuple[torch.Tensor, SampledTokens]:
        """Logits of every row of `hidden` and their draw: what a decode graph captures after its forward."""
        logits = self.model.compute_logits(hidden)
        return logits, self.draw(logits)

    def draw(self, logits: torch.Tensor, mask: TokenMask | None = None, advance: bool = True) -> SampledTokens:
        """The draw of `logits`' rows (restricted by a grammar's `mask`): what a decode graph captures after
        the logits, and a masked-draw graph on its own. `advance` False leaves the keys as they are (a
        warm-up that compiles the kernel outside a capture)."""
        rows = logits.shape[0]
        keys = self.keys[:rows]
        if advance:
            keys.add_(1)  # a fresh noise stream per row and replay
        checked = torch.empty(rows, dtype=torch.int64, device=logits.device)
        gumbel_sample_checked = triton_kernel("sampling", "gumbel_sample_checked")
        token_mask = mask.as_tuple() if mask is not None else None
        token_ids, finite = gumbel_sample_checked(logits, self.inv_temperatures[:rows], keys, token_mask, checked)
        return SampledTokens(token_ids, finite, None, checked)

    @staticmethod
    def takes(batch: list[SamplingInput]) -> bool:
        """Whether the graph's draw is this batch's: every row plain (greedy or temperature-only), unseeded
        unless greedy, and no logprobs."""
        return all(plain(b) and b.params.logprobs is None and (b.params.greedy or b.params.seed is None) for b in batch)

    def prepare(self, batch: list[SamplingInput]) -> None:
        """Before the replay that draws `batch`'s tokens: its inverse temperatures queued into the buffer the
        replay reads, when they differ from what it holds."""
        self.steps += 1
        inverse = inverse_temperatures(batch)
        if inverse != self.written[: len(inverse)]:
            self.inv_temperatures[: len(inverse)].copy_(self.sampler.row_tensor(inverse, torch.float32))
            self.written = inverse + self.written[len(inverse) :]


def available(sampler: Sampler, tp_size: int) -> bool:
    """Where decode graphs can sample: a fused sampler on CUDA with the Triton kernel, one rank (under tensor
    parallelism rank 0 alone samples, outside the graphs)."""
    return (
        sampler.fused
        and sampler.device.type == "cuda"
        and tp_size == 1
        and triton_kernel("sampling", "gumbel_sample_checked") is not None
    )
