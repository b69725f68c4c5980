"""Load the network under an embedding model: a BertModel-family encoder or a decoder run without a KV cache.

Both backbones answer `forward(token_ids, positions, meta) -> (tokens, hidden)` for a packed batch.
Decoders reuse the engine's Llama/Qwen2/Qwen3 modules (and, through LLM.embed, the engine's loaded
weights); given packed metadata their attention runs causal varlen attention, so nothing is cached.
Checkpoints may name decoder weights with or without the `model.` prefix (Qwen3-Embedding ships
as `Qwen3Model` in some releases, as `Qwen3ForCausalLM` in others); both load.

A quantized encoder folder (config.json's quantization_config: compressed-tensors as `mopt quantize`
or llm-compressor write it) loads here too, the way the engine's loader does a decoder: each linear
gets its QuantMethod before the weights load, takes the packed tensors, and is finished after, so
`Embedder`, `mopt embed`, `mopt serve` and the quantize gate all run one loading path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from model_optimizer.runtime.embed.varlen_attention import PaddedMeta, VarlenMeta
from model_optimizer.runtime.models.bert import BertArgs, BertModel
from model_optimizer.runtime.models.loader import build_model, init_dummy_weights, load_weights, resolve_dtype
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.registry import DECODER_BASE_NAMES, is_encoder, resolve_model_class

if TYPE_CHECKING:
    from model_optimizer.runtime.layers.quantization.spec import QuantSpec

__all__ = ["DECODER_BASE_NAMES", "DecoderBackbone", "EncoderBackbone", "is_encoder", "load_backbone"]

log = logging.getLogger(__name__)


class EncoderBackbone(nn.Module):
    causal = False

    def __init__(self, model: BertModel) -> None:
        super().__init__()
        self.model = model
        self.hidden_size = model.args.hidden_size
        self.vocab_size = model.args.vocab_size
        self.max_seq_len = model.args.max_seq_len

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: VarlenMeta | PaddedMeta) -> torch.Tensor:
        return self.model(token_ids, positions, lambda q, k, v: meta.attend(q, k, v, causal=False))


class DecoderBackbone(nn.Module):
    causal = True

    def __init__(self, model: nn.Module, args: DecoderArgs) -> None:
        """`model` is a decoder body (DecoderModel): the generation engine's own, when it has one. Its
        attention layers see the packed metadata and attend without a KV cache (layers/attention.py)."""
        super().__init__()
        self.model = model
        self.hidden_size = args.hidden_size
        self.vocab_size = args.vocab_size
        self.max_seq_len = args.max_position_embeddings

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: VarlenMeta | PaddedMeta) -> torch.Tensor:
        return self.model(token_ids, positions, meta)


def load_backbone(model_dir: Path, hf: dict, dtype: str, device: torch.device, load_format: str) -> nn.Module:
    """The encoder or decoder backbone of `model_dir`, weights loaded, in eval mode. `hf` is the folder's
    config.json; its quantization_config, if any, is applied (encoders only, for now)."""
    from model_optimizer.runtime.layers.quantization.spec import resolve_spec

    source = model_dir / "config.json"
    spec = resolve_spec(hf, None)
    if is_encoder(hf):
        try:
            args = BertArgs.from_dict(hf)
        except KeyError as exc:
            raise ValueError(f"{source} lacks {exc.args[0]!r}, which a {hf['architectures'][0]} needs") from None
        model = build_model(lambda: BertModel(args), embed_dtype(dtype, args, device), device)  # type: ignore[arg-type]
        _fill(model, model_dir, load_format, BertModel.checkpoint_name, BertModel.stacked_params, spec)
        return EncoderBackbone(model).eval()
    if spec is not None:
        raise ValueError(
            f"{source}: quantized decoder embedders ({spec.method}, {spec.source} layout) are not supported yet; "
            "quantized encoders (BERT family) are, and a float decoder embedder loads as it is"
        )
    arch = hf["architectures"][0]
    args = DecoderArgs.from_dict({**hf, "architectures": [DECODER_BASE_NAMES.get(arch, arch)]}, source=str(source))
    causal_lm_cls = resolve_model_class(args.architecture)
    full = build_model(lambda: causal_lm_cls(args), embed_dtype(dtype, args, device), device)
    model = full.model  # the lm_head is not needed for embeddings
    _fill(model, model_dir, load_format, _decoder_checkpoint_name, causal_lm_cls.stacked_params)
    return DecoderBackbone(model, args).eval()


def embed_dtype(requested: str, args: BertArgs | DecoderArgs, device: torch.device) -> torch.dtype:
    """EmbedConfig.dtype's rule (the rule and why it differs from the engine's: embed/config.py): the
    loader's, except that `auto` runs a float32 checkpoint in half precision on CUDA, where tensor cores,
    flash attention and CUDA graphs apply. float16 for encoders (all-MiniLM-L6-v2 in float16 keeps a
    cosine >= 0.999998 to sentence-transformers' float32 vectors, 400 varied texts, measured on the CPU),
    bfloat16 for decoders, whose activations can overflow float16 (Qwen2-family models are known to)."""
    dtype = resolve_dtype(requested, args, device)  # type: ignore[arg-type]
    if requested != "auto" or device.type != "cuda" or dtype != torch.float32:
        return dtype
    if isinstance(args, BertArgs):
        half = torch.float16
    else:  # this GPU's own bf16: Volta and Turing (below compute capability 8.0) only emulate it
        half = torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16
    log.info("dtype auto: the float32 checkpoint runs in %s on CUDA (dtype=float32 keeps float32)", half)
    return half


def _decoder_checkpoint_name(name: str) -> str | None:
    if name.startswith("lm_head.") or name.endswith("rotary_emb.inv_freq"):
        return None
    return name[len("model.") :] if name.startswith("model.") else name


def _fill(
    model: nn.Module, model_dir: Path, load_format: str, rename, stacked: dict, spec: QuantSpec | None = None
) -> None:
    """Weights into `model`; with a QuantSpec its linears are quantized first (dummy weights are filled
    dense and rounded after, as the engine's loader does) and finished once everything has loaded."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization, process_quantized_weights

    dtype = next(model.parameters()).dtype
    attach_quantization(model, spec, dtype, dummy=load_format == "dummy")
    if load_format == "dummy":
        init_dummy_weights(model)
    else:
        load_checkpoint(model, model_dir, rename, stacked)
    if spec is not None:
        process_quantized_weights(model)


def load_checkpoint(
    model: nn.Module, model_dir: Path, rename: Callable[[str], str | None], stacked: dict[str, tuple[str, str]]
) -> None:
    """Copy every checkpoint tensor that `rename` maps to a parameter; fail on unknown or missing ones."""
    load_weights(model, model_dir, rename, stacked)
