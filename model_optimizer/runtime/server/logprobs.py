"""Engine logprobs -> OpenAI logprobs objects (completions' and chat's shapes), tokens named by their text."""

from __future__ import annotations

import math
from operator import itemgetter

from model_optimizer.runtime.engine.detokenizer import TokenTexts
from model_optimizer.runtime.engine.outputs import Logprob
from model_optimizer.runtime.server.protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob

MIN_LOGPROB = -9999.0  # JSON has no -inf
_isfinite = math.isfinite
_by_value = itemgetter(1)


def finite(value: float) -> float:
    return value if _isfinite(value) else MIN_LOGPROB


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
