"""Accuracy gate for embedding models: cosine of each quantized embedding to the original's.

Perplexity and next-token agreement mean nothing for an encoder (MiniLM, BGE): what a user keeps
is the vector. Both models embed the same held-out texts through our own `Embedder` (tokenizing,
packing, pooling and normalization as served); per text the cosine of the two vectors, and,
because a search index only cares about order, how often each text's nearest neighbour among the
others stays the same.

`mopt quantize` compares the original folder with the quantized folder it wrote, loaded back from
disk (`load_quantized_backbone`), so the figures hold for the weights a user gets; `round_backbone`
rounds a loaded backbone in place, for measuring a method without writing anything. AWQ's
calibration walks decoder LM layers and is not offered for embedding models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

EMBED_METHODS = ("fp8", "int8", "rtn-int4")
MIN_TEXT_CHARS = 40
"""Built-in evaluation paragraphs shorter than this (headings, one-line signatures) are skipped."""


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


def evaluation_texts(docs: list[str], num_texts: int, split_paragraphs: bool = True) -> list[str]:
    """Up to `num_texts` texts spread evenly over the documents: their paragraphs (blank-line
    separated, at least MIN_TEXT_CHARS long) or, with split_paragraphs False, the documents as given."""
    if num_texts <= 0:
        raise ValueError(f"need at least one evaluation text, got {num_texts}")
    if split_paragraphs:
        texts = [p.strip() for d in docs for p in d.split("\n\n") if len(p.strip()) >= MIN_TEXT_CHARS]
    else:
        texts = [d for d in docs if d.strip()]
    if not texts:
        raise ValueError(f"the evaluation text holds no paragraph of at least {MIN_TEXT_CHARS} characters")
    step = max(len(texts) / num_texts, 1.0)
    return [texts[int(i * step)] for i in range(min(num_texts, len(texts)))]


def round_backbone(backbone: torch.nn.Module, method: str, group_size: int = 128) -> int:
    """Round every Linear of a loaded backbone in place as `method` does; returns how many."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization, process_quantized_weights
    from model_optimizer.runtime.layers.quantization.spec import QuantSpec

    check_embed_method(method)
    dtype = next(backbone.parameters()).dtype
    layers = attach_quantization(backbone, QuantSpec(method, group_size=group_size), dtype, dummy=True)
    process_quantized_weights(backbone)
    return len(layers)


def check_embed_method(method: str) -> None:
    if method not in EMBED_METHODS:
        raise ValueError(
            f"embedding models can be quantized with {', '.join(EMBED_METHODS)}, got {method!r}"
            + (" (AWQ calibrates decoder LM layers)" if method == "awq" else "")
        )


def load_quantized_backbone(folder: str | Path, dtype: str = "auto", device: str = "auto") -> torch.nn.Module:
    """The encoder of a quantized folder (compressed-tensors, as `mopt quantize` or llm-compressor write
    it), its linears holding the checkpoint's rounded weights, ready for `Embedder(backbone=...)`. The
    loading is the embedding engine's own (runtime/embed/backbone.py `load_backbone`); this only refuses a folder
    that is not quantized, so the gate never scores the original against itself."""
    from model_optimizer.runtime.device import pick_device
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.models.model_config import read_config

    folder = Path(folder)
    hf = read_config(folder)
    if not hf.get("quantization_config"):
        raise ValueError(f"{folder} has no quantization_config in config.json: it is not a quantized folder")
    return load_backbone(folder, hf, dtype, pick_device(device), "auto")


def compare_embedders(
    reference, quantized, texts: list[str], max_tokens: int, on_progress: Callable[[int], None] | None = None
) -> tuple[EmbeddingAccuracy, int]:
    """Embed `texts` with two `Embedder`s, each text cut to `max_tokens` (or the model's limit);
    returns the metrics and the number of tokens each model read."""
    if not texts:
        raise ValueError("embedding evaluation needs at least one text")
    cut = min(max_tokens, reference.max_seq_length, quantized.max_seq_length)
    want = reference.encode(texts, truncate_prompt_tokens=cut, on_progress=on_progress)
    got = quantized.encode(texts, truncate_prompt_tokens=cut, on_progress=on_progress)
    return compare_embeddings(want.embeddings, got.embeddings), want.num_prompt_tokens


def evaluate_embedding_model(
    model_dir: str | Path,
    method: str,
    texts: list[str],
    group_size: int = 128,
    device: str = "auto",
    dtype: str = "auto",
) -> EmbeddingAccuracy:
    """Embed `texts` with the original model and with its linears rounded by `method`; compare.
    Nothing is written: a quick measure of a method before `mopt quantize`."""
    from model_optimizer.runtime.device import pick_device
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.models.model_config import read_config

    model_dir = Path(model_dir)
    reference = Embedder(model_dir, device=device, dtype=dtype)
    backbone = load_backbone(model_dir, read_config(model_dir), dtype, pick_device(device), "auto")
    if round_backbone(backbone, method, group_size) == 0:
        raise ValueError(f"{model_dir}: no linear layer to quantize")
    quantized = Embedder(model_dir, backbone=backbone, device=device, dtype=dtype)
    return compare_embedders(reference, quantized, texts, reference.max_seq_length)[0]


def embedding_gate_failures(acc: EmbeddingAccuracy, min_cosine: float | None) -> list[str]:
    """Plain-words reasons the result is refused (empty: it passes)."""
    if min_cosine is not None and not acc.mean_cosine >= min_cosine:  # NaN vectors fail, never pass
        return [
            f"mean cosine to the original embeddings {acc.mean_cosine:.5f} (worst text {acc.min_cosine:.5f}) "
            f"is below --min-cosine {min_cosine}"
        ]
    return []
