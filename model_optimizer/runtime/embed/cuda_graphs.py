"""CUDA graphs for small packed batches: one graph replay instead of hundreds of kernel launches.

A forward pass of a small batch is bound by the host: every layer launches a dozen kernels
through Python, torch.compile wrappers and the flash varlen op, while the GPU work per kernel is
microseconds. A captured graph replays the whole forward with one launch.

A graph is captured per bucket `GraphKey(num_tokens, num_seqs, max_len)`, each a power of two at
least the batch's value. The batch is copied into the graph's static buffers: token ids and
positions fill the first num_tokens rows (rows after them keep earlier, valid ids and belong to no
sequence); `cu_seqlens` is padded with the batch's token count, i.e. zero-length sequences, which
flash varlen skips. Every op outside attention works row by row, so the padding rows never touch
the real ones; the caller pools from the first num_tokens rows only. Only the flash varlen path
(fp16 / bf16 on CUDA) runs in a graph: the padded-SDPA fallback, and the soft-capped attention of a
Gemma 2, read sequence lengths on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from model_optimizer.runtime.embed import varlen_attention as va
from model_optimizer.runtime.embed.packing import PackedBatch
from model_optimizer.runtime.embed.varlen_attention import VarlenMeta
from model_optimizer.runtime.graph_capture import capturing


@dataclass(frozen=True)
class GraphKey:
    num_tokens: int
    num_seqs: int
    max_len: int


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    token_ids: torch.Tensor
    positions: torch.Tensor
    cu_seqlens: torch.Tensor
    hidden: torch.Tensor


def bucket(n: int, floor: int = 1) -> int:
    """The smallest power of two >= max(n, floor)."""
    return 1 << (max(n, floor) - 1).bit_length()


def graph_key(lengths: list[int], max_tokens: int) -> GraphKey | None:
    """The bucket a batch of sequences with these lengths replays in; None past max_tokens."""
    num_tokens = sum(lengths)
    if num_tokens > max_tokens:
        return None
    padded = bucket(num_tokens, 16)
    return GraphKey(padded, bucket(len(lengths)), min(bucket(max(lengths)), padded))


class GraphRunner:
    """Runs packed batches of up to `max_tokens` tokens as graph replays; returns None for the others."""

    def __init__(self, backbone: nn.Module, device: torch.device, max_tokens: int, max_graphs: int = 32) -> None:
        self.backbone = backbone
        self.device = device
        self.max_tokens = max_tokens
        self.max_graphs = max_graphs
        self.graphs: dict[GraphKey, _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()  # one memory pool: graphs run one at a time
        self.disabled = False

    def run(self, packed: PackedBatch) -> torch.Tensor | None:
        """Hidden states (num_tokens, hidden) of the batch, or None when it has no graph."""
        key = graph_key(packed.meta.lengths, self.max_tokens)
        if key is None or self.disabled or not va._flash_varlen_ok():
            return None
        graph = self.graphs.get(key)
        if graph is None:
            if len(self.graphs) >= self.max_graphs:
                return None
            graph = self._capture(key)
            if graph is None:
                return None
            self.graphs[key] = graph
        num_tokens, num_seqs = len(packed.token_ids), len(packed.meta.lengths)
        graph.token_ids[:num_tokens].copy_(packed.token_ids)
        graph.positions[:num_tokens].copy_(packed.positions)
        graph.cu_seqlens[: num_seqs + 1].copy_(packed.meta.cu_seqlens)
        graph.cu_seqlens[num_seqs + 1 :].fill_(num_tokens)  # zero-length sequences after the real ones
        graph.graph.replay()
        return graph.hidden[:num_tokens]

    def _capture(self, key: GraphKey) -> _Graph | None:
        token_ids = torch.zeros(key.num_tokens, dtype=torch.int64, device=self.device)
        positions = torch.zeros_like(token_ids)
        cu_seqlens = torch.zeros(key.num_seqs + 1, dtype=torch.int32, device=self.device)
        # attention reads only cu_seqlens on the device and max_len on the host: the bucket's
        meta = VarlenMeta(cu_seqlens, [key.max_len] + [0] * (key.num_seqs - 1))
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # warm-up outside the capture: compiles, autotuning, cuBLAS workspaces
            self.backbone(token_ids, positions, meta)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if not va._flash_varlen_ok() or not meta.graphable:  # the warm-up read lengths on the host
            self.disabled = True
            return None
        graph = torch.cuda.CUDAGraph()
        with capturing(graph, self.pool):
            hidden = self.backbone(token_ids, positions, meta)
        return _Graph(graph, token_ids, positions, cu_seqlens, hidden)
