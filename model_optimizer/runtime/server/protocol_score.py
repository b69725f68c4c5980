"""Request shapes of vLLM's scoring endpoints: /score (text pairs) and /rerank (a query against documents)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol import INT64_MAX, PromptInput, _Request

SCORE_FIELD_PAIRS = (("text_1", "text_2"), ("data_1", "data_2"), ("queries", "documents"))
"""The names vLLM's /score takes its two sides under, one pair per request (text_1 / text_2 first)."""


class ScoreRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    text_1: PromptInput | None = None
    """One text (scored against every text of text_2) or as many texts as text_2 (scored in pairs)."""
    text_2: PromptInput | None = None
    data_1: PromptInput | None = None
    """text_1 under vLLM's newer name (with data_2)."""
    data_2: PromptInput | None = None
    queries: PromptInput | None = None
    """text_1 under vLLM's newest name (with documents)."""
    documents: PromptInput | None = None
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)

    def sides(self) -> tuple[tuple[str, Any], tuple[str, Any]]:
        """((name, value), (name, value)) of the two sides, under the one pair of names the request used; a 400
        naming the first field when no pair, a part of one, or two pairs are given."""
        given = [pair for pair in SCORE_FIELD_PAIRS if any(getattr(self, name) is not None for name in pair)]
        if len(given) == 1 and all(getattr(self, name) is not None for name in given[0]):
            first, second = given[0]
            return (first, getattr(self, first)), (second, getattr(self, second))
        names = " / ".join(f"{a} and {b}" for a, b in SCORE_FIELD_PAIRS)
        first = given[0][0] if given else "text_1"
        raise APIError(400, f"give the two sides as one pair of fields: {names}", first)


class RerankRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    query: str
    documents: list[str]
    top_n: int = Field(default=0, ge=0, le=INT64_MAX)
    """The best this many documents (0: all of them), as vLLM's."""
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)
