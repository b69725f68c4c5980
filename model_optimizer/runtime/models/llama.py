"""Llama-family decoder (Llama 2/3/3.1, Mistral); Qwen2 and Qwen3 are small variations of it.

Tensor parallel as built (distributed.py's `get_tp()`): each rank keeps num_heads / tp query
heads and their KV heads (shared by several ranks when there are fewer KV heads than ranks), and
intermediate_size / tp MLP channels; o_proj and down_proj end in one all_reduce each. On one
device every count is the model's own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from model_optimizer.runtime.distributed import get_tp
from model_optimizer.runtime.layers.activation import SiluAndMul
from model_optimizer.runtime.layers.attention import Attention, AttentionMetadata
from model_optimizer.runtime.layers.embedding import LMHead, VocabEmbedding
from model_optimizer.runtime.layers.linear import MergedLinear, RowParallelLinear
from model_optimizer.runtime.layers.norm import RMSNorm
from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding, Rotation
from model_optimizer.runtime.models.model_config import DecoderArgs


class DecoderAttention(nn.Module):
    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        tp = get_tp()
        first_head, self.num_heads = tp.shard(args.num_heads, "num_attention_heads")
        first_kv_head, self.num_kv_heads = tp.kv_heads(args.num_kv_heads)
        self.head_dim = args.head_dim
        """num_heads and num_kv_heads are this rank's: what its attention and its KV cache hold."""
        hd = self.head_dim
        rows = {
            "q": (first_head * hd, self.num_heads * hd),
            "k": (first_kv_head * hd, self.num_kv_heads * hd),
            "v": (first_kv_head * hd, self.num_kv_heads * hd),
        }
        full = {"q": args.num_heads * hd, "k": args.num_kv_heads * hd, "v": args.num_kv_heads * hd}
        self.qk_norm = args.qk_norm
        bias = args.qkv_bias or args.attention_bias
        self.qkv_proj = MergedLinear(args.hidden_size, full, bias=bias, rows=rows)
        self.o_proj = RowParallelLinear(full["q"], args.hidden_size, bias=args.attention_bias)
        if self.qk_norm:  # per head_dim, so every rank holds the whole (small) weight
            self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
        self.rotary = rotary
        window = args.layer_windows[layer_idx]
        self.attn = Attention(layer_idx, self.num_heads, self.num_kv_heads, self.head_dim, window)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)  # (tokens, heads, head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            rotation = Rotation(self.rotary, positions, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps)
        else:
            rotation = Rotation(self.rotary, positions)
        # rotated inside attention: with Llama's rotary on the GPU, in the kernel that stores K and V
        return self.o_proj(self.attn(q, k, v, meta, rotation))


class DecoderMLP(nn.Module):
    def __init__(self, args: DecoderArgs) -> None:
        super().__init__()
        size = args.intermediate_size
        self.gate_up_proj = MergedLinear(args.hidden_size, {"gate": size, "up": size}, bias=args.mlp_bias)
        self.down_proj = RowParallelLinear(size, args.hidden_size, bias=args.mlp_bias)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_up_proj.forward_gated(x))  # self.act, fused where the GEMV runs


class DecoderLayer(nn.Module):
    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = DecoderAttention(args, layer_idx, rotary)
        self.mlp = self.build_mlp(args, layer_idx)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(positions, h, meta)
        after_norm = getattr(self.mlp, "forward_after_norm", None)  # a block fusing the norm (layers/moe.py)
        if after_norm is not None:
            return after_norm(h, residual, self.post_attention_layernorm)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual

    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        """The layer's feed-forward block: a subclass returns a mixture of experts (models/qwen3_moe.py)."""
        return DecoderMLP(args)


SILU_NAMES = ("silu", "swish")
"""transformers' names of SiLU (ACT2FN): the one activation of the Llama-family MLP (as in vLLM)."""


def refuse_activation(args: DecoderArgs) -> None:
    """ValueError naming `hidden_act` when it is not SiLU, which every MLP of this family computes (a gelu
    config would otherwise run as SiLU: wrong logits, no error)."""
    act = args.hf.get("hidden_act", "silu")
    if act not in SILU_NAMES:
        raise ValueError(f"config.json: hidden_act {act!r} is not supported for {args.architecture}; supported: silu")


def build_layer(args: DecoderArgs, layer_idx: int, make: Callable[[], nn.Module]) -> nn.Module:
    """Decoder layer `layer_idx` from `make()`, built in host memory when weight offload keeps it there
    (`args.host_layer_ids`), so a model larger than the GPU never has all its layers on it at once."""
    if layer_idx not in args.host_layer_ids:
        return make()
    with torch.device("cpu"):
        return make()


class DecoderModel(nn.Module):
    def __init__(
        self, args: DecoderArgs, layer_cls: type[nn.Module] = DecoderLayer, rotary: nn.Module | None = None
    ) -> None:
        """`layer_cls(args, layer_idx, rotary)` builds each layer; `rotary` defaults to the config's RoPE."""
        super().__init__()
        if rotary is None:
            rotary = RotaryEmbedding(RopeConfig.from_hf(args.hf, args.head_dim, args.max_position_embeddings))
        self.embed_tokens = VocabEmbedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(
            build_layer(args, i, lambda i=i: layer_cls(args, i, rotary)) for i in range(args.num_layers)
        )
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed_tokens(token_ids)
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(nn.Module):
    # checkpoint name fragment -> (our parameter fragment, shard id)
    stacked_params = {
        ".q_proj.": (".qkv_proj.", "q"),
        ".k_proj.": (".qkv_proj.", "k"),
        ".v_proj.": (".qkv_proj.", "v"),
        ".gate_proj.": (".gate_up_proj.", "gate"),
        ".up_proj.": (".gate_up_proj.", "up"),
    }

    def __init__(
        self, args: DecoderArgs, layer_cls: type[nn.Module] = DecoderLayer, rotary: nn.Module | None = None
    ) -> None:
        """`layer_cls` and `rotary`: see DecoderModel (variants of the Llama layer, models/glm4.py say)."""
        super().__init__()
        refuse_activation(args)
        self.args = args
        tp = get_tp()
        tp.shard(args.num_heads, "num_attention_heads")  # before any layer is built: a plain message
        self.local_num_kv_heads = tp.kv_heads(args.num_kv_heads)[1]
        """KV heads each attention layer of this rank stores: the model's num_key_value_heads on one
        device, its share under tensor parallelism (one when ranks share a head). The KV cache is
        sized from it (runner/model_runner.py)."""
        self.model = DecoderModel(args, layer_cls, rotary)
        self.lm_head = LMHead(args.vocab_size, args.hidden_size)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states (tokens, hidden) of the flat batch."""
        return self.model(token_ids, positions, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
