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


PromptLogprobsList = list["dict[int, Logprob] | None"]


def prompt_logprobs_json(texts: TokenTexts, prompt_logprobs: PromptLogprobsList) -> list[dict | None]:
    """vLLM's prompt_logprobs field: per position null or {"token id": {logprob, rank, decoded_token}}."""
    return [
        None
        if entry is None
        else {
            str(t): {"logprob": finite(lp.logprob), "rank": lp.rank, "decoded_token": texts(t)}
            for t, lp in entry.items()
        }
        for entry in prompt_logprobs
    ]


def echo_logprobs_dict(
    texts: TokenTexts, prompt_token_ids: list[int], prompt_logprobs: PromptLogprobsList, num_top: int
) -> dict:
    """The prompt's part of an echoed choice's logprobs (completions' shape): its first token with null
    logprob and null top_logprobs, as OpenAI writes it, then each scored token with its num_top most likely."""
    first = texts(prompt_token_ids[0])
    scored = [
        Logprob(t, entry[t].logprob, entry[t].rank, {u: lp.logprob for u, lp in entry.items()})
        for t, entry in zip(prompt_token_ids[1:], prompt_logprobs[1:])
        if entry is not None
    ]
    rest = completion_logprobs_dict(texts, scored, len(first or ""), num_top)
    return {
        "tokens": [first, *rest["tokens"]],
        "token_logprobs": [None, *rest["token_logprobs"]],
        "top_logprobs": [None, *rest["top_logprobs"]],
        "text_offset": [0, *rest["text_offset"]],
    }


def join_logprobs_dicts(head: dict, tail: dict | None) -> dict:
    """Completions' logprobs of the echoed prompt followed by those of the generated tokens."""
    return head if tail is None else {key: head[key] + tail[key] for key in head}
