"""Attention over the paged KV cache, with its metadata passed explicitly by the runner.

Dispatch: Triton kernels on CUDA when available, else the pure-torch reference (CPU path). A layer that
passes its q and k unrotated with a `Rotation` (layers/rotary.py) has them rotated here: with Llama's
rotary on the GPU, one kernel rotates q and k and stores K and V in the cache (`norm_rotate_store`), so
a decoder layer launches rotary+store, then attention; on the CPU, or with another rotary module, q
and k are rotated, then stored (`store_kv`), as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.kernels.reference import KVStore, paged_attention_ref
from model_optimizer.runtime.layers.rotary import RotaryEmbedding, Rotation


@dataclass
class AttentionMetadata:
    """Flat description of one batch, shared by all layers of a forward pass."""

    slot_mapping: torch.Tensor
    """(num_tokens,) int64 cache slot of each new token (block_id * block_size + offset)."""
    query_start_loc: torch.Tensor
    """(num_seqs + 1,) int32 offsets of each sequence's new tokens in the flat batch."""
    seq_lens: torch.Tensor
    """(num_seqs,) int32 context length of each sequence after this step."""
    block_tables: torch.Tensor
    """(num_seqs, max_blocks) int32 block ids of each sequence."""
    max_query_len: int
    max_seq_len: int
    kv_caches: list[torch.Tensor] | None = None
    """Scratch caches, one `kv_cache_shape` tensor per layer (K and V planes of the KV heads, or a
    model's own layout: multi-head latent attention's one row per token), for a
    forward outside the engine (memory profiling, calibration, scoring). None, as in every engine step:
    each layer uses the cache bound to it once at start-up (`bind_kv_caches`): the caches never change,
    so they are not part of what a step describes."""
    num_splits: int | None = None
    """Split-KV partitions for decode; fixed per batch-size bucket so eager and graphed steps agree."""

    @classmethod
    def for_prefill(
        cls, lengths: list[int], block_size: int, kv_caches: list[torch.Tensor], device: torch.device
    ) -> AttentionMetadata:
        """Fresh prompts of `lengths` tokens side by side, in consecutive blocks from block 0 of `kv_caches`
        (scratch caches for profiling or scoring, not the engine's)."""
        blocks = [-(-n // block_size) for n in lengths]
        starts = [sum(blocks[:i]) for i in range(len(blocks))]
        table = torch.zeros(len(lengths), max(blocks), dtype=torch.int32)
        for row, (start, num_blocks) in enumerate(zip(starts, blocks)):
            table[row, :num_blocks] = torch.arange(start, start + num_blocks, dtype=torch.int32)
        slots = torch.cat([torch.arange(n) + start * block_size for n, start in zip(lengths, starts)])
        ends = torch.tensor(lengths).cumsum(0).tolist()
        return cls(
            slot_mapping=slots.to(device),
            query_start_loc=torch.tensor([0, *ends], dtype=torch.int32, device=device),
            seq_lens=torch.tensor(lengths, dtype=torch.int32, device=device),
            block_tables=table.to(device),
            max_query_len=max(lengths),
            max_seq_len=max(lengths),
            kv_caches=kv_caches,
        )


class Attention(nn.Module):
    def __init__(
        self,
        layer_idx: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        sliding_window: int | None,
        scale: float | None = None,
        softcap: float | None = None,
    ) -> None:
        """`scale` multiplies q.k: head_dim ** -0.5 unless given (Gemma's query_pre_attn_scalar). `softcap`
        c caps each scaled score s to c * tanh(s / c) before the mask (Gemma 2's attn_logit_softcapping)."""
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = head_dim**-0.5 if scale is None else scale
        self.sliding_window = sliding_window
        self.softcap = softcap
        # fp8 KV-cache scales (cache = x / scale); 1.0 keeps bf16-range activations inside e4m3's +-448
        self.register_buffer("k_scale", torch.ones((), dtype=torch.float32), persistent=False)
        self.register_buffer("v_scale", torch.ones((), dtype=torch.float32), persistent=False)
        self.kv_cache: torch.Tensor | None = None
        """This layer's slice of the engine's paged cache, set by `bind_kv_caches` (a plain attribute, not a
        buffer: it is no weight, and `.to()` or a state dict must not copy it)."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        meta: AttentionMetadata,
        rotation: Rotation | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q (tokens, heads, head_dim), k and v (tokens, kv_heads, head_dim) -> (tokens, heads * head_dim).
        With `rotation`, q and k come unrotated and are rotated here (see the module docstring). `sinks`
        (heads,): gpt-oss's learned attention sinks, one more logit per head in each softmax denominator
        whose weight is dropped (kernels/reference.py); the model's own parameter, passed at each call.

        Any other `meta` is a packed batch without a KV cache (embeddings, embed/varlen_attention.py): it
        attends causally itself and nothing is stored, so one decoder serves generation and embeddings."""
        if not isinstance(meta, AttentionMetadata):
            if sinks is not None:
                raise ValueError("attention sinks (gpt-oss) are not supported without a KV cache (embeddings)")
            if rotation is not None:
                q, k = rotation.apply(q, k)
            # the packed paths scale by head_dim ** -0.5 (Gemma's differs): q takes the rest, so the score
            # they scale, and cap when softcap is set, is q.k * self.scale
            if self.scale != self.head_dim**-0.5:
                q = q * (self.scale * self.head_dim**0.5)
            return meta.attend(q, k, v, causal=True, window=self.sliding_window, softcap=self.softcap).flatten(1)
        kv_cache = self.kv_cache if meta.kv_caches is None else meta.kv_caches[self.layer_idx]
        if kv_cache is None:
            raise RuntimeError(f"attention layer {self.layer_idx} has no KV cache: bind_kv_caches was not called")
        kernels = gpu_kernels(q)
        store = KVStore(v, kv_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        q = self._rotate_and_store(q, k, store, rotation, kernels)
        if kernels is None:
            out = paged_attention_ref(
                q, kv_cache, meta.query_start_loc, meta.seq_lens, meta.block_tables, self.scale, self.sliding_window,
                self.k_scale, self.v_scale, self.softcap, sinks,
            )  # fmt: skip
            return out.flatten(1)
        out = kernels.paged_attention(
            q,
            kv_cache,
            meta.query_start_loc,
            meta.seq_lens,
            meta.block_tables,
            self.scale,
            self.sliding_window,
            max_query_len=meta.max_query_len,
            max_seq_len=meta.max_seq_len,
            k_scale=self.k_scale,
            v_scale=self.v_scale,
            num_splits=meta.num_splits,
            softcap=self.softcap,
            **({} if sinks is None else {"sinks": sinks}),  # without: the call every other model makes
        )
        return out.flatten(1)

    def _rotate_and_store(
        self, q: torch.Tensor, k: torch.Tensor, store: KVStore, rotation: Rotation | None, kernels: GpuKernels | None
    ) -> torch.Tensor:
        """q, rotated when `rotation` is given, after k (rotated likewise) and the values went into the cache."""
        if rotation is not None and kernels is not None and isinstance(rotation.rotary, RotaryEmbedding):
            cos, sin = rotation.rotary.cos, rotation.rotary.sin
            return kernels.norm_rotate_store(
                q, k, rotation.positions, cos, sin, store, rotation.q_weight, rotation.k_weight, rotation.eps
            )
        if rotation is not None:
            q, k = rotation.apply(q, k)
        if kernels is None:
            store.store_ref(k)
        else:
            kernels.store_kv(k, store.value, store.kv_cache, store.slot_mapping, store.k_scale, store.v_scale)
        return q


class GpuKernels(NamedTuple):
    """The Triton kernels attention launches."""

    store_kv: Callable
    norm_rotate_store: Callable
    paged_attention: Callable


def gpu_kernels(x: torch.Tensor) -> GpuKernels | None:
    """Attention's Triton kernels for tensors on CUDA; None elsewhere or without Triton (the torch path).
    The interpreter tests substitute this to run the kernels on the CPU (tests/runtime/kernels)."""
    attend = triton_kernel("paged_attention", "paged_attention") if aot.on_gpu(x) else None
    if attend is None:
        return None
    return GpuKernels(triton_kernel("store_kv", "store_kv"), triton_kernel("rotary", "norm_rotate_store"), attend)


def bind_kv_caches(model: nn.Module, kv_caches: list[torch.Tensor]) -> None:
    """Give each attention layer of `model` its cache, `kv_caches[layer_idx]`, once for the engine's life."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    if len(layers) != len(kv_caches):
        raise ValueError(f"{len(kv_caches)} KV caches for a model with {len(layers)} attention layers")
    for layer in layers:
        layer.kv_cache = kv_caches[layer.layer_idx]


def kv_cache_shape(model: nn.Module, num_blocks: int, block_size: int) -> tuple[int, ...]:
    """Shape of one layer's paged cache: (2, num_blocks, block_size, this rank's KV heads, head_dim) for
    K and V planes, or the model's own (`model.kv_cache_shape`: a DeepSeek model's one latent row per
    token, kernels/mla_reference.py). Blocks are always dimension 1, so block slices stay `cache[:, a:b]`."""
    own = getattr(model, "kv_cache_shape", None)
    if own is not None:
        return tuple(own(num_blocks, block_size))
    return (2, num_blocks, block_size, model.local_num_kv_heads, model.args.head_dim)


def decode_num_splits(padded_num_seqs: int, num_kv_heads: int, max_model_len: int, device: torch.device) -> int | None:
    """Split-KV count for a decode batch, from its padded size alone (None off the GPU)."""
    choose_num_splits = triton_kernel("paged_attention", "choose_num_splits") if aot.gpu_device(device) else None
    if choose_num_splits is None:
        return None
    num_sms = triton_kernel("paged_attention", "_num_sms")
    return choose_num_splits(padded_num_seqs, num_kv_heads, 1, max_model_len, num_sms(device.index))
