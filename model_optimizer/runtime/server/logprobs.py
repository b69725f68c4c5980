"""Engine logprobs -> OpenAI logprobs objects (completions' and chat's shapes), tokens named by their text."""

from __future__ import annotations

import math
import weakref
from operator import itemgetter
from typing import Any

from model_optimizer.runtime.engine.outputs import Logprob
from model_optimizer.runtime.server.protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

MIN_LOGPROB = -9999.0  # JSON has no -inf
_isfinite = math.isfinite
_by_value = itemgetter(1)


def finite(value: float) -> float:
    return value if _isfinite(value) else MIN_LOGPROB


_SHARED_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per tokenizer: token id -> its text, shared by every request (a token's text never changes)."""


class TokenTexts:
    """Text of single tokens, cached (logprobs name each token by its text); None without a tokenizer.

    Logprobs name 1 + top-k tokens per generated token, in every chunk of every stream that asks for
    them, so the texts are cached for the tokenizer's lifetime, across requests."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}
        if tokenizer is not None:
            try:
                self.cache = _SHARED_TEXTS.setdefault(tokenizer, {})
            except TypeError:  # a tokenizer that takes no weak reference: a cache of this request's own
                pass
        self.keys: dict[int, str] = {}
        """Token id -> its top_logprobs key (see key)."""

    def __call__(self, token_id: int) -> str | None:
        if self.tokenizer is None:
            return None
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    def key(self, token_id: int) -> str:
        """A top_logprobs key: the token's text, or "token_id:N" (vLLM's spelling) when there is no tokenizer."""
        key = self.keys.get(token_id)
        if key is None:
            text = self(token_id)
            key = self.keys[token_id] = f"token_id:{token_id}" if text is None else text
        return key


def completion_logprobs(
    texts: TokenTexts, logprobs: list[Logprob], text_offset: int, num_top: int
) -> CompletionLogprobs:
    return CompletionLogprobs(**completion_logprobs_dict(texts, logprobs, text_offset, num_top))


def completion_logprobs_dict(texts: TokenTexts, logprobs: list[Logprob], text_offset: int, num_top: int) -> dict:
    """CompletionLogprobs as the plain dict a stream chunk serializes (no model per chunk: see streaming.py)."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    keys, key = texts.keys, texts.key
    for lp in logprobs:
        token = texts(lp.token_id)
        chosen = lp.logprob if _isfinite(lp.logprob) else MIN_LOGPROB
        tokens.append(token)
        token_logprobs.append(chosen)
        top = {
            (keys.get(t) or key(t)): (v if _isfinite(v) else MIN_LOGPROB)
            for t, v in sorted(lp.top.items(), key=_by_value, reverse=True)[:num_top]
        }
        top.setdefault(keys.get(lp.token_id) or key(lp.token_id), chosen)
        top_logprobs.append(top)
        offsets.append(text_offset)
        text_offset += len(token or "")
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}


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
    """The num_top most likely (stable: ties keep their order, as sorting by -logprob did)."""
    return sorted(lp.top.items(), key=_by_value, reverse=True)[:num_top]
