"""Accuracy gate for embedding models: cosine of each quantized embedding to the original's.

Perplexity and next-token agreement mean nothing for an encoder (MiniLM, BGE) or a decoder embedder
(Qwen3-Embedding): what a user keeps is the vector. Both models embed the same held-out texts
through our own `Embedder` (tokenizing, packing, pooling and normalization as served); per text the
cosine of the two vectors, and, because a search index only cares about order, how often each
text's nearest neighbour among the others stays the same.

The quantized side is the original backbone with every `Linear` rounded in place by the method's
own `QuantMethod` (the rounding `mopt quantize` writes), so the figures hold for the weights the
method produces; AWQ's calibration walks decoder LM layers and is not offered here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

EMBED_METHODS = ("fp8", "int8", "rtn-int4")


@dataclass
class EmbeddingAccuracy:
    num_texts: int
    mean_cosine: float
    """Mean over texts of cos(original vector, quantized vector)."""
    min_cosine: float
    """The worst text: what one query of an index might see."""
    neighbour_agreement: float
    """Fraction of texts whose nearest other text (by cosine) is the same under both models."""

    def to_dict(self) -> dict:
        return asdict(self)


def compare_embeddings(reference: torch.Tensor, quantized: torch.Tensor) -> EmbeddingAccuracy:
    """Metrics of two (num_texts, dim) embedding matrices of the same texts, in the same order."""
    if reference.shape != quantized.shape or reference.dim() != 2 or reference.shape[0] == 0:
        raise ValueError(
            f"need two equal, non-empty (num_texts, dim) matrices, got {tuple(reference.shape)} "
            f"and {tuple(quantized.shape)}"
        )
    ref = torch.nn.functional.normalize(reference.double(), dim=1)
    q = torch.nn.functional.normalize(quantized.double(), dim=1)
    cosines = (ref * q).sum(dim=1)
    agreement = 1.0
    if ref.shape[0] > 1:
        eye = torch.eye(ref.shape[0], dtype=torch.bool)
        near_ref = (ref @ ref.T).masked_fill(eye, -2).argmax(dim=1)
        near_q = (q @ q.T).masked_fill(eye, -2).argmax(dim=1)
        agreement = (near_ref == near_q).double().mean().item()
    return EmbeddingAccuracy(
        num_texts=ref.shape[0],
        mean_cosine=cosines.mean().item(),
        min_cosine=cosines.min().item(),
        neighbour_agreement=agreement,
    )


def round_backbone(backbone: torch.nn.Module, method: str, group_size: int = 128) -> int:
    """Round every Linear of a loaded backbone in place as `method` does; returns how many."""
    from model_optimizer.quant.attach import attach_quantization, process_quantized_weights
    from model_optimizer.quant.spec import QuantSpec

    if method not in EMBED_METHODS:
        raise ValueError(
            f"embedding models can be evaluated with {', '.join(EMBED_METHODS)}, got {method!r} "
            "(AWQ calibrates decoder LM layers)"
        )
    dtype = next(backbone.parameters()).dtype
    layers = attach_quantization(backbone, QuantSpec(method, group_size=group_size), dtype, dummy=True)
    process_quantized_weights(backbone)
    return len(layers)


def evaluate_embedding_model(
    model_dir: str | Path,
    method: str,
    texts: list[str],
    group_size: int = 128,
    device: str = "auto",
    dtype: str = "auto",
) -> EmbeddingAccuracy:
    """Embed `texts` with the original model and with its linears rounded by `method`; compare."""
    from model_optimizer.embed import Embedder
    from model_optimizer.embed.backbone import load_backbone
    from model_optimizer.models.model_config import read_config
    from model_optimizer.runner.model_runner import pick_device

    if not texts:
        raise ValueError("embedding evaluation needs at least one text")
    model_dir = Path(model_dir)
    reference = Embedder(model_dir, device=device, dtype=dtype)
    want = reference.encode(texts).embeddings
    del reference
    backbone = load_backbone(model_dir, read_config(model_dir), dtype, pick_device(device), "auto")
    if round_backbone(backbone, method, group_size) == 0:
        raise ValueError(f"{model_dir}: no linear layer to quantize")
    quantized = Embedder(model_dir, backbone=backbone, device=device, dtype=dtype)
    return compare_embeddings(want, quantized.encode(texts).embeddings)


def embedding_gate_failures(acc: EmbeddingAccuracy, min_cosine: float | None) -> list[str]:
    """Plain-words reasons the result is refused (empty: it passes)."""
    if min_cosine is not None and acc.mean_cosine < min_cosine:
        return [
            f"mean cosine to the original embeddings {acc.mean_cosine:.5f} (worst text {acc.min_cosine:.5f}) "
            f"is below --min-cosine {min_cosine:g}"
        ]
    return []
