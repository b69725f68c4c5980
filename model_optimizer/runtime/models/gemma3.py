"""Gemma 3, text only (`Gemma3ForCausalLM`, model_type gemma3_text; also the language model of the 4B-27B
image-and-text checkpoints, `Gemma3ForConditionalGeneration`, whose vision tower is not loaded).

Differences from Llama, each as transformers' Gemma3 computes it:
- layers alternate sliding-window and global attention (`layer_types`, or every
  `sliding_window_pattern`-th layer global in older configs), with their own RoPE: global layers
  `rope_theta` (and `rope_scaling`, linear x8 in the 4B-27B models), sliding ones
  `rope_local_base_freq`; transformers 5 writes both under `rope_parameters` per layer type;
- attention scores are scaled by query_pre_attn_scalar ** -0.5, not head_dim ** -0.5;
- RMSNorm multiplies by (1 + weight) in float32 before rounding, on the hidden states and on each
  head's queries and keys; four norms a layer, around attention and around the MLP;
- embeddings are multiplied by sqrt(hidden_size) rounded to the model dtype; lm_head is tied;
- the MLP activation is gelu with the tanh approximation; logits are soft-capped when
  `final_logit_softcapping` is set. `attn_logit_softcapping` is refused: transformers' Gemma3 reads it
  but never applies it (its checkpoints set it null), so a value has no reference meaning.
Norms and the q/k norms run as torch ops on every device (the fused kernels compute Llama's norm).
Gemma 2 (models/gemma2.py) is this model without the q/k norms, with one RoPE for both layer types
and its attention scores soft-capped (by the attention kernels, layers/attention.py): `GemmaLayout`
holds what differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.distributed import get_tp
from model_optimizer.runtime.layers.attention import Attention, AttentionMetadata
from model_optimizer.runtime.layers.embedding import LMHead, VocabEmbedding
from model_optimizer.runtime.layers.linear import MergedLinear, RowParallelLinear
from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding, Rotation
from model_optimizer.runtime.models.llama import LlamaForCausalLM, build_layer
from model_optimizer.runtime.models.model_config import DecoderArgs

LAYER_TYPES = ("sliding_attention", "full_attention")


def layer_types(hf: dict, num_layers: int, pattern: int) -> list[str]:
    """Each layer's type: config.json's `layer_types`, else every `pattern`-th layer global, the rest sliding."""
    types = hf.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if len(types) != num_layers or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"config.json: layer_types must list {num_layers} of {', '.join(LAYER_TYPES)}, got {types!r}")
    return list(types)


def rope_configs(hf: dict, head_dim: int, max_position: int) -> dict[str, RopeConfig]:
    """RoPE of each layer type, from transformers 5's per-type rope_parameters or the older keys."""
    params = hf.get("rope_parameters") or {}
    if not all(t in params for t in LAYER_TYPES):
        params = {
            "full_attention": {"rope_theta": hf.get("rope_theta", 1_000_000.0), **(hf.get("rope_scaling") or {})},
            "sliding_attention": {"rope_theta": hf.get("rope_local_base_freq", 10_000.0)},
        }
    return {t: RopeConfig.from_hf({"rope_parameters": params[t]}, head_dim, max_position) for t in LAYER_TYPES}


@dataclass(frozen=True)
class GemmaLayout:
    """What tells the Gemma generations apart here: each layer's type, each type's RoPE, whether each
    head's queries and keys are normed (Gemma 3) or not (Gemma 2), and the attention scores' soft cap."""

    types: list[str]
    ropes: dict[str, RopeConfig]
    qk_norm: bool
    softcap: float | None = None
    """c in c * tanh(score / c) (Gemma 2's attn_logit_softcapping); None: scores as they are."""


def check_supported(hf: dict, family: str, caps_attention: bool) -> None:
    act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise ValueError(
            f"config.json: hidden_activation {act!r} is not supported for {family}; supported: gelu_pytorch_tanh"
        )
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        cap = hf.get(key)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0):
            raise ValueError(f"config.json: {key} must be a positive number or null, got {cap!r}")
    if not caps_attention and hf.get("attn_logit_softcapping") is not None:
        raise ValueError(
            f"config.json: attn_logit_softcapping is not supported for {family}: transformers' class does not "
            "apply it (its checkpoints set it to null)"
        )
    if hf.get("use_bidirectional_attention"):
        raise ValueError(
            "config.json: use_bidirectional_attention (embedding variants) is not supported for generation"
        )


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)  # scaled in float32, rounded once


class GemmaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual), as layers/norm.RMSNorm."""
        if residual is not None:
            x = x + residual  # in the model dtype, as transformers adds
        return gemma_rms_norm(x, self.weight, self.eps), x


class Gemma3Attention(nn.Module):
    def __init__(
        self, args: DecoderArgs, layer_idx: int, window: int | None, rotary: RotaryEmbedding, layout: GemmaLayout
    ) -> None:
        super().__init__()
        tp = get_tp()
        first_head, self.num_heads = tp.shard(args.num_heads, "num_attention_heads")
        first_kv_head, self.num_kv_heads = tp.kv_heads(args.num_kv_heads)
        hd = self.head_dim = args.head_dim
        rows = {"q": (first_head * hd, self.num_heads * hd)}
        rows.update(k=(first_kv_head * hd, self.num_kv_heads * hd), v=(first_kv_head * hd, self.num_kv_heads * hd))
        full = {"q": args.num_heads * hd, "k": args.num_kv_heads * hd, "v": args.num_kv_heads * hd}
        self.qkv_proj = MergedLinear(args.hidden_size, full, bias=args.attention_bias, rows=rows)
        self.o_proj = RowParallelLinear(full["q"], args.hidden_size, bias=args.attention_bias)
        self.qk_norm = layout.qk_norm
        if self.qk_norm:
            self.q_norm = GemmaRMSNorm(hd, args.rms_norm_eps)
            self.k_norm = GemmaRMSNorm(hd, args.rms_norm_eps)
        self.rotary = rotary
        scale = float(args.hf.get("query_pre_attn_scalar", 256)) ** -0.5
        self.attn = Attention(
            layer_idx, self.num_heads, self.num_kv_heads, hd, window, scale=scale, softcap=layout.softcap
        )

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)  # (tokens, heads, head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, _ = self.q_norm(q)
            k, _ = self.k_norm(k)
        # Gemma's q/k norm (scaled by 1 + weight) is applied above: attention rotates, and stores K and V
        return self.o_proj(self.attn(q, k, v, meta, Rotation(self.rotary, positions)))


class Gemma3MLP(nn.Module):
    def __init__(self, args: DecoderArgs) -> None:
        super().__init__()
        size = args.intermediate_size
        self.gate_up_proj = MergedLinear(args.hidden_size, {"gate": size, "up": size})
        self.down_proj = RowParallelLinear(size, args.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.gelu(gate, approximate="tanh") * up)


class Gemma3DecoderLayer(nn.Module):
    def __init__(
        self, args: DecoderArgs, layer_idx: int, layer_type: str, rotary: RotaryEmbedding, layout: GemmaLayout
    ) -> None:
        super().__init__()
        window = args.hf.get("sliding_window") if layer_type == "sliding_attention" else None
        self.self_attn = Gemma3Attention(args, layer_idx, window, rotary, layout)
        self.mlp = Gemma3MLP(args)
        h, eps = args.hidden_size, args.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(h, eps)
        self.post_attention_layernorm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(h, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(h, eps)

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h, _ = self.post_attention_layernorm(self.self_attn(positions, h, meta))
        h, residual = self.pre_feedforward_layernorm(h, residual)  # residual + normed attention output
        h, _ = self.post_feedforward_layernorm(self.mlp(h))
        return h, residual


class Gemma3Model(nn.Module):
    def __init__(self, args: DecoderArgs, layout: GemmaLayout) -> None:
        super().__init__()
        rotary = rotary_modules(layout)
        self.embed_tokens = VocabEmbedding(args.vocab_size, args.hidden_size)
        self.embed_scale = args.hidden_size**0.5
        self.layers = nn.ModuleList(
            build_layer(args, i, lambda i=i, t=t: Gemma3DecoderLayer(args, i, t, rotary[t], layout))
            for i, t in enumerate(layout.types)
        )
        self.norm = GemmaRMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = self.embed_tokens(token_ids)
        x = x * torch.tensor(self.embed_scale).to(x.dtype)  # float32 scale rounded to the model dtype, as transformers
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta)
        x, _ = self.norm(x, residual)
        return x


def rotary_modules(layout: GemmaLayout) -> dict[str, RotaryEmbedding]:
    """One rotary module per distinct RoPE, shared by the layer types that use it (Gemma 2's two types
    rotate alike: one table of cos and sin, not two)."""
    modules: dict[str, RotaryEmbedding] = {}
    for t in sorted(set(layout.types)):
        same = [m for u, m in modules.items() if layout.ropes[u] == layout.ropes[t]]
        modules[t] = same[0] if same else RotaryEmbedding(layout.ropes[t])
    return modules


MULTIMODAL_PREFIXES = (
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
)
"""Where an image-and-text checkpoint (Gemma3ForConditionalGeneration) keeps its language model's tensors,
in transformers 4's layout and 5's: -> this model's names."""
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


class Gemma3ForCausalLM(nn.Module):
    stacked_params = LlamaForCausalLM.stacked_params
    family = "Gemma 3"
    caps_attention = False
    """Whether transformers' class applies attn_logit_softcapping (a value is refused where it does not)."""

    def __init__(self, args: DecoderArgs) -> None:
        super().__init__()
        check_supported(args.hf, self.family, self.caps_attention)
        self.args = args  # tied unless config.json says otherwise: model_config.tied_embeddings
        tp = get_tp()
        tp.shard(args.num_heads, "num_attention_heads")  # before any layer is built: a plain message
        self.local_num_kv_heads = tp.kv_heads(args.num_kv_heads)[1]
        """KV heads each attention layer of this rank stores (runner/model_runner.py sizes the cache by it)."""
        self.softcap = args.hf.get("final_logit_softcapping")
        self.model = Gemma3Model(args, self.layout(args))
        self.lm_head = LMHead(args.vocab_size, args.hidden_size)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def layout(args: DecoderArgs) -> GemmaLayout:
        """Gemma 3's layers: every `sliding_window_pattern`-th global (6) unless `layer_types` lists them, a
        RoPE per type, q/k norms."""
        types = layer_types(args.hf, args.num_layers, args.hf.get("sliding_window_pattern", 6))
        return GemmaLayout(types, rope_configs(args.hf, args.head_dim, args.max_position_embeddings), qk_norm=True)

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states (tokens, hidden) of the flat batch."""
        return self.model(token_ids, positions, meta)

    def checkpoint_name(self, name: str) -> str | None:
        """This model's name for a checkpoint tensor: an image-and-text checkpoint's language model tensors
        under their text names, its vision tower and projector not loaded (None)."""
        if not self.args.hf.get("text_of"):
            return name
        for old, new in MULTIMODAL_PREFIXES:
            if name.startswith(old):
                return new + name[len(old) :]
        return None if name.startswith(VISION_PREFIXES) else name

    def checkpoint_aliases(self, name: str) -> list[str]:
        """The names an image-and-text checkpoint gives one of our modules (`model.layers.0.mlp.down_proj` is
        its `language_model.model.layers.0.mlp.down_proj`): a pre-quantized release's ignore list names those."""
        if not self.args.hf.get("text_of"):
            return []
        dotted = name + "."
        return [(old + dotted[len(new) :])[:-1] for old, new in MULTIMODAL_PREFIXES if dotted.startswith(new)]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        if self.softcap is None:
            return logits
        return torch.tanh(logits / self.softcap) * self.softcap
