"""BertModel-family encoder (BERT, MiniLM, BGE, E5; RoBERTa / XLM-R position offsets) over a flat batch.

The model works on flat tokens (num_tokens, hidden): linear layers never see padding. Attention is
handed in by the caller as `attend(q, k, v)`, so the same weights serve the packed varlen engine
(`model_optimizer.runtime.embed`) and the padded graph exported to ONNX. There is no KV cache: an encoder
reads each input once, whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.layers.embedding import VocabEmbedding
from model_optimizer.runtime.layers.linear import Linear, MergedLinear
from model_optimizer.runtime.models.registry import ENCODER_ARCHITECTURES

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""attend(q, k, v) with (tokens, heads, head_dim) tensors -> (tokens, heads, head_dim)."""

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass
class BertArgs:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    position_offset: int
    """First position id: 0 for BERT; pad_token_id + 1 for RoBERTa, whose positions skip the padding index."""
    torch_dtype: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def max_seq_len(self) -> int:
        """Longest input the position table can hold."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_dict(cls, hf: dict) -> BertArgs:
        arch = (hf.get("architectures") or ["BertModel"])[0]
        family = ENCODER_ARCHITECTURES.get(arch)
        if family is None:
            raise ValueError(
                f"architecture {arch!r} is not a supported encoder; supported: {', '.join(sorted(ENCODER_ARCHITECTURES))}"
            )
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"position_embedding_type {hf['position_embedding_type']!r} is not supported; only absolute"
            )
        act = hf.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {act!r} is not supported; supported: {', '.join(ACTIVATIONS)}")
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            hidden_act=act,
            position_offset=(hf.get("pad_token_id", 1) + 1) if family == "roberta" else 0,
            torch_dtype=str(hf.get("torch_dtype") or hf.get("dtype") or "float32"),
        )


class DenseNorm(nn.Module):
    """LayerNorm(dense(h) + residual): the output block after attention and after the MLP."""

    def __init__(self, in_features: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = Linear(in_features, hidden, bias=True)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.num_heads, self.head_dim = args.num_heads, args.head_dim
        size = args.num_heads * args.head_dim
        self.qkv_proj = MergedLinear(args.hidden_size, {"q": size, "k": size, "v": size}, bias=True)
        self.output = DenseNorm(size, args.hidden_size, args.layer_norm_eps)

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        shape = (-1, self.num_heads, self.head_dim)  # (tokens, heads, head_dim)
        out = attend(q.reshape(shape), k.reshape(shape), v.reshape(shape))
        return self.output(out.flatten(1), x)


class BertLayer(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.attention = BertAttention(args)
        self.intermediate = nn.Module()
        self.intermediate.dense = Linear(args.hidden_size, args.intermediate_size, bias=True)
        self.output = DenseNorm(args.intermediate_size, args.hidden_size, args.layer_norm_eps)
        self.act = ACTIVATIONS[args.hidden_act]

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        x = self.attention(x, attend)
        return self.output(self.act(self.intermediate.dense(x)), x)


class BertEmbeddings(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.word_embeddings = VocabEmbedding(args.vocab_size, args.hidden_size)
        self.position_embeddings = VocabEmbedding(args.max_position_embeddings, args.hidden_size)
        self.token_type_embeddings = VocabEmbedding(args.type_vocab_size, args.hidden_size)
        self.LayerNorm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)
        self.position_offset = args.position_offset

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(token_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions + self.position_offset)
        return self.LayerNorm(x)


class BertEncoder(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(args) for _ in range(args.num_layers))


class BertModel(nn.Module):
    # checkpoint name fragment -> (our parameter fragment, shard id)
    stacked_params = {
        ".attention.self.query.": (".attention.qkv_proj.", "q"),
        ".attention.self.key.": (".attention.qkv_proj.", "k"),
        ".attention.self.value.": (".attention.qkv_proj.", "v"),
    }

    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.args = args
        self.embeddings = BertEmbeddings(args)
        self.encoder = BertEncoder(args)

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        attend: Attend,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Last hidden states of the flat batch: token_ids and positions (tokens,) -> (tokens, hidden).

        Positions count from 0 in each sequence; RoBERTa's offset is added here."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(token_ids)
        x = self.embeddings(token_ids, positions, token_type_ids)
        for layer in self.encoder.layer:
            x = layer(x, attend)
        return x

    @staticmethod
    def checkpoint_name(name: str) -> str | None:
        """Our parameter name for a checkpoint tensor, or None for tensors an encoder does not use
        (the pooler, an MLM head, the position_ids buffer)."""
        for prefix in ("bert.", "roberta.", "model."):
            if name.startswith(prefix):
                name = name[len(prefix) :]
        if name.startswith(("pooler.", "cls.", "lm_head.")) or name.endswith(("position_ids", "token_type_ids")):
            return None
        return name
