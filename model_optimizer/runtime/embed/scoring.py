"""Scores of text pairs by an embedding model, as vLLM scores them for one (`LLM.score`, `/score`, `/rerank`):
the cosine similarity of the two texts' embeddings.

Pairs follow vLLM's rule: one first text against each of the second texts, or as many first texts as
second texts, paired in order. Each distinct text is embedded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where vectors are scored: a generation server's frontend never loads it
    import torch

Text = str | list[int]


def score_pairs(first: Text | Sequence[Text], second: Text | Sequence[Text]) -> list[tuple[Text, Text]]:
    """The (first, second) pairs to score; ValueError naming the rule when the counts do not pair up."""
    firsts, seconds = _as_list(first, "the first texts"), _as_list(second, "the second texts")
    if len(firsts) == 1:
        return [(firsts[0], s) for s in seconds]
    if len(firsts) != len(seconds):
        raise ValueError(
            f"got {len(firsts)} first texts and {len(seconds)} second texts: give one first text (scored against "
            "every second text) or as many first texts as second texts (scored in pairs)"
        )
    return list(zip(firsts, seconds))


def distinct_inputs(pairs: list[tuple[Text, Text]]) -> tuple[list[Text], list[tuple[int, int]]]:
    """The distinct texts of `pairs`, to embed once each, and each pair as indices into them."""
    index: dict[str | tuple[int, ...], int] = {}
    inputs: list[Text] = []

    def at(text: Text) -> int:
        key = text if isinstance(text, str) else tuple(text)
        if key not in index:
            index[key] = len(inputs)
            inputs.append(text)
        return index[key]

    return inputs, [(at(a), at(b)) for a, b in pairs]


def cosine_scores(embeddings: torch.Tensor, pairs: list[tuple[int, int]]) -> list[float]:
    """The cosine similarity of each pair of rows of `embeddings` (normalized here: a model folder that does not
    normalize its vectors scores the same)."""
    import torch
    import torch.nn.functional as F

    unit = F.normalize(embeddings.float(), dim=-1)
    if not pairs:
        return []
    first = torch.tensor([a for a, _ in pairs])
    second = torch.tensor([b for _, b in pairs])
    return (unit[first] * unit[second]).sum(dim=-1).tolist()


def _as_list(texts: Text | Sequence[Text], name: str) -> list[Text]:
    if isinstance(texts, str) or (isinstance(texts, list) and texts and all(isinstance(t, int) for t in texts)):
        return [texts]
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError(f"{name} must be a text, token ids, or a non-empty list of them")
    return list(texts)
