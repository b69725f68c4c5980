"""Scores of text pairs by an embedding model, as vLLM scores them for one (`LLM.score`, `/score`, `/rerank`):
the cosine similarity of the two texts' embeddings.

Pairs follow vLLM's rule: one first text against each of the second texts, or as many first texts as
second texts, paired in order. Each distinct text is embedded once, yet usage counts every pair as vLLM
does (`pair_num_tokens`): a text in ten pairs counts ten times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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


def distinct_inputs(
    pairs: list[tuple[Text, Text]], names: list[tuple[str, str]] | None = None
) -> tuple[list[Text], list[tuple[int, int]], list[str]]:
    """The distinct texts of `pairs`, to embed once each, each pair as indices into them, and each distinct
    text's name: the first of `names` (each pair's, as ("text_1", "text_2[3]")) it was met under, else
    "input N"."""
    index: dict[str | tuple[int, ...], int] = {}
    inputs: list[Text] = []
    first_names: list[str] = []

    def at(text: Text, name: str) -> int:
        key = text if isinstance(text, str) else tuple(text)
        if key not in index:
            index[key] = len(inputs)
            inputs.append(text)
            first_names.append(name)
        return index[key]

    named = names or [(f"input {2 * i}", f"input {2 * i + 1}") for i in range(len(pairs))]
    return inputs, [(at(a, na), at(b, nb)) for (a, b), (na, nb) in zip(pairs, named)], first_names


def pair_separator(tokenizer: Any) -> list[int]:
    """The ids vLLM puts between a pair's two texts' ids in its token count and `prompt_token_ids`: the
    tokenizer's pad token, or none for a tokenizer without one."""
    pad_token_id = getattr(tokenizer, "pad_token_id", None)
    return [] if pad_token_id is None else [pad_token_id]


def pair_num_tokens(num_tokens: Sequence[int], pairs: list[tuple[int, int]], num_separator_tokens: int) -> int:
    """A scoring request's usage as vLLM reports it: per pair, its first text's tokens, `num_separator_tokens`
    (`pair_separator`'s: vLLM joins a pair's ids with the pad token) and its second text's tokens.
    `num_tokens`: each distinct text's; `pairs`: indices into them (`distinct_inputs`)."""
    return sum(num_tokens[a] + num_separator_tokens + num_tokens[b] for a, b in pairs)


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


def _as_list(texts: Text | dict | Sequence[Text | dict], name: str) -> list[Text]:
    """One text, token ids (a list or tuple of ints) or vLLM's prompt dict, or a non-empty list of them."""
    if isinstance(texts, (str, dict)) or _is_ids(texts):
        return [_as_text(texts, name)]
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError(f"{name} must be a text, token ids, or a non-empty list of them")
    return [_as_text(t, name) for t in texts]


def _is_ids(value: object) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, int) for t in value)


def _as_text(value: object, name: str) -> Text:
    """A text or token ids, from vLLM's {"prompt": ...} / {"prompt_token_ids": [...]} dicts too."""
    if isinstance(value, dict):
        if set(value) == {"prompt"} and isinstance(value["prompt"], str):
            return value["prompt"]
        if set(value) == {"prompt_token_ids"} and _is_ids(value["prompt_token_ids"]):
            return list(value["prompt_token_ids"])
        raise ValueError(
            f"{name}: a prompt dict has one key, prompt (text) or prompt_token_ids (ids), got {sorted(value)}"
        )
    if isinstance(value, str):
        return value
    if _is_ids(value):
        return list(value)
    raise ValueError(f"{name} must be texts or token ids, got {type(value).__name__}")
