"""Request shapes of vLLM's scoring endpoints: /score (text pairs) and /rerank (a query against documents)."""

from __future__ import annotations

from pydantic import Field

from model_optimizer.runtime.server.protocol import INT64_MAX, PromptInput, _Request


class ScoreRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    text_1: PromptInput
    """One text (scored against every text of text_2) or as many texts as text_2 (scored in pairs)."""
    text_2: PromptInput
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)


class RerankRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    query: str
    documents: list[str]
    top_n: int = Field(default=0, ge=0, le=INT64_MAX)
    """The best this many documents (0: all of them), as vLLM's."""
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)
