"""Multi-head latent attention (MLA) over the paged latent cache, and the projections it keeps in float.

`MlaAttention` is an `Attention` (so `bind_kv_caches` hands it its layer's cache) whose cache holds
one row of kv_lora_rank + qk_rope_head_dim values per token (kernels/mla_reference.py has the
layout and the two ways to attend). Per step it stores the new tokens' rows, then:
- on CUDA, the absorbed form: each head's query no-rope part goes through its rows of kv_b_proj
  (W_UK) into the latent space, one Triton kernel attends over the cached rows (decode tokens and
  prefill chunks alike, CUDA-graph safe), and each head's latent output goes through W_UV back to
  v_head_dim. Nothing is up-projected per cached token: a decode step reads one row per token;
- on the CPU, the up-projected form, transformers' arithmetic: every cached row times kv_b_proj
  gives the heads' keys and values (`absorb = True` runs the absorbed form there instead, with the
  torch reference of the kernel: the tests compare both).

`LatentLinear`: q_a_proj, kv_a_proj_with_mqa and kv_b_proj are no `Linear`, so `--quantization`
leaves them in the model dtype, as llm-compressor's DeepSeek references leave the compressing
projections (q_a_proj, kv_a_proj_with_mqa), and as the absorbed form needs kv_b_proj (its rows are
used as matrices of their own, W_UK and W_UV, not through a matmul of the layer).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.kernels.mla_reference import latent_attention_ref, mla_attention_ref, store_latent_ref
from model_optimizer.runtime.layers.attention import Attention, AttentionMetadata
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, materialize, reads_lazily
from model_optimizer.runtime.models.mla_args import MlaArgs


class LatentLinear(nn.Module):
    """y = x W^T (+ b) in the model dtype whatever the quantization; `rows` (start, count) of the
    checkpoint's `out_features` rows are this rank's (kv_b_proj: its heads), all by default."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = False, rows: tuple[int, int] | None = None
    ) -> None:
        super().__init__()
        self.full_out_features = out_features
        self.row_start, self.out_features = rows or (0, out_features)
        self.in_features = in_features
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features))
        self.weight.weight_loader = self._load_rows  # type: ignore[attr-defined]
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(self.out_features))
            self.bias.weight_loader = self._load_rows  # type: ignore[attr-defined]

    @reads_lazily
    def _load_rows(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        expected = (self.full_out_features, *param.shape[1:])
        if tuple(loaded.shape) != expected:
            raise ValueError(f"expected shape {expected}, got {tuple(loaded.shape)}")
        param.data.copy_(materialize(loaded.narrow(0, self.row_start, self.out_features), param.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def gpu_kernels(x: torch.Tensor) -> tuple | None:
    """(store, attend) Triton kernels for tensors on CUDA; None elsewhere or without Triton (the torch path).
    The interpreter tests substitute this to run the kernels on the CPU (tests/runtime/kernels)."""
    attend = triton_kernel("mla_attention", "latent_attention") if aot.on_gpu(x) else None
    return None if attend is None else (triton_kernel("store_kv", "store_kv"), attend)


class MlaAttention(Attention):
    """Attention of this rank's `num_heads` over the latent cache; see the module docstring."""

    def __init__(self, layer_idx: int, num_heads: int, mla: MlaArgs, scale: float) -> None:
        super().__init__(layer_idx, num_heads, 1, mla.latent_dim, None, scale)
        self.kv_lora_rank, self.v_head_dim = mla.kv_lora_rank, mla.v_head_dim
        self.qk_nope_head_dim = mla.qk_nope_head_dim
        self.absorb: bool | None = None
        """Attend in the absorbed form (True) or up-projected (False); None: absorbed on CUDA only."""

    def forward(  # type: ignore[override]
        self,
        q_nope: torch.Tensor,
        q_pe: torch.Tensor,
        latent: torch.Tensor,
        kv_b_weight: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """q_nope (tokens, heads, qk_nope), q_pe (tokens, heads, qk_rope) rotated, latent (tokens,
        kv_lora_rank + qk_rope) the new tokens' cache rows, kv_b_weight this rank's rows of kv_b_proj
        -> (tokens, heads * v_head_dim)."""
        if not isinstance(meta, AttentionMetadata):
            raise ValueError("multi-head latent attention needs the paged cache: DeepSeek models do not embed")
        cache = self.kv_cache if meta.kv_caches is None else meta.kv_caches[self.layer_idx]
        if cache is None:
            raise RuntimeError(f"attention layer {self.layer_idx} has no KV cache: bind_kv_caches was not called")
        kernels = gpu_kernels(q_nope)
        if kernels is not None:
            rows = latent.unsqueeze(1)  # (tokens, 1, latent_dim): one "head"
            # the cache's one plane seen as two of the same memory: the K and V stores write the same row
            kernels[0](rows, rows, cache.expand(2, -1, -1, -1, -1), meta.slot_mapping, self.k_scale, self.k_scale)
        else:
            store_latent_ref(latent, cache, meta.slot_mapping, self.k_scale)
        absorb = kernels is not None if self.absorb is None else self.absorb
        if not absorb:
            out = mla_attention_ref(
                q_nope, q_pe, cache, meta.query_start_loc, meta.seq_lens, meta.block_tables, kv_b_weight,
                self.scale, self.k_scale,
            )  # fmt: skip
            return out.flatten(1)
        return self._absorbed(q_nope, q_pe, cache, kv_b_weight, meta, kernels[1] if kernels else None)

    def _absorbed(self, q_nope, q_pe, cache, kv_b_weight, meta: AttentionMetadata, kernel) -> torch.Tensor:
        num_tokens, num_heads = q_nope.shape[:2]
        w = kv_b_weight.view(num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        w_uk, w_uv = w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]  # (heads, nope|v, kv_lora)
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk)  # (heads, tokens, kv_lora)
        query = torch.cat([q_latent.transpose(0, 1), q_pe], dim=-1)  # (tokens, heads, kv_lora + rope)
        del q_latent  # a long prefill's activations: each of these is tokens x heads x 512 values
        args = (query, cache, meta.query_start_loc, meta.seq_lens, meta.block_tables, self.scale, self.kv_lora_rank)
        if kernel is not None:
            out = kernel(
                *args,
                max_query_len=meta.max_query_len,
                max_seq_len=meta.max_seq_len,
                k_scale=self.k_scale,
                num_splits=meta.num_splits,
            )
        else:
            out = latent_attention_ref(*args, self.k_scale)  # (tokens, heads, kv_lora)
        del query, args
        values = torch.bmm(out.transpose(0, 1), w_uv.transpose(1, 2))  # (heads, tokens, v_head_dim)
        del out
        return values.transpose(0, 1).reshape(num_tokens, num_heads * self.v_head_dim)
