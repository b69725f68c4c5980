"""Engine logprobs -> OpenAI logprobs objects (completions' and chat's shapes), tokens named by their text."""

from __future__ import annotations

import math
from typing import Any

from model_optimizer.engine.outputs import Logprob
from model_optimizer.server.protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

MIN_LOGPROB = -9999.0  # JSON has no -inf


def finite(value: float) -> float:
    return value if math.isfinite(value) else MIN_LOGPROB


class TokenTexts:
    """Text of single tokens, cached (logprobs name each token by its text); None without a tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str | None:
        if self.tokenizer is None:
            return None
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text


def completion_logprobs(
    texts: TokenTexts, logprobs: list[Logprob], text_offset: int, num_top: int
) -> CompletionLogprobs:
    return CompletionLogprobs(**completion_logprobs_dict(texts, logprobs, text_offset, num_top))


def completion_logprobs_dict(texts: TokenTexts, logprobs: list[Logprob], text_offset: int, num_top: int) -> dict:
    """CompletionLogprobs as the plain dict a stream chunk serializes (no model per chunk: see streaming.py)."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for lp in logprobs:
        token = texts(lp.token_id)
        tokens.append(token)
        token_logprobs.append(finite(lp.logprob))
        top = {_key(texts, t): finite(v) for t, v in _top(lp, num_top)}
        top.setdefault(_key(texts, lp.token_id), finite(lp.logprob))
        top_logprobs.append(top)
        offsets.append(text_offset)
        text_offset += len(token or "")
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


def _key(texts: TokenTexts, token_id: int) -> str:
    """A top_logprobs key: the token's text, or "token_id:N" (vLLM's spelling) when there is no tokenizer."""
    text = texts(token_id)
    return f"token_id:{token_id}" if text is None else text


def chat_logprobs(texts: TokenTexts, logprobs: list[Logprob], num_top: int) -> ChatLogprobs:
    content = []
    for lp in logprobs:
        token = texts(lp.token_id)
        top = [
            TopLogprob(token=texts(t), logprob=finite(v), bytes=list(texts(t).encode())) for t, v in _top(lp, num_top)
        ]
        content.append(
            ChatTokenLogprob(token=token, logprob=finite(lp.logprob), bytes=list(token.encode()), top_logprobs=top)
        )
    return ChatLogprobs(content=content)


def chat_logprobs_dict(texts: TokenTexts, logprobs: list[Logprob], num_top: int) -> dict:
    """ChatLogprobs as the plain dict a stream chunk serializes; the same fields, in the same order."""
    content = []
    for lp in logprobs:
        token = texts(lp.token_id)
        if token is None:  # as the model would refuse it: chat has a tokenizer (its template needs one)
            raise ValueError("chat logprobs need token texts, and this model has no tokenizer")
        top = []
        for t, v in _top(lp, num_top):
            text = texts(t)
            top.append({"token": text, "logprob": finite(v), "bytes": list(text.encode())})
        content.append(
            {"token": token, "logprob": finite(lp.logprob), "bytes": list(token.encode()), "top_logprobs": top}
        )
    return {"content": content}


def _top(lp: Logprob, num_top: int) -> list[tuple[int, float]]:
    return sorted(lp.top.items(), key=lambda kv: -kv[1])[:num_top]
