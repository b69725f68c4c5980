"""Engine logprobs -> OpenAI logprobs objects (completions' and chat's shapes), tokens named by their text.

The engine's logprobs come as columns (a LogprobList: engine/logprob_list.py) and are read as such: a
chunk's ids and floats in one `tolist()` each, texts and keys through cached look-ups mapped over the
ids, each token's top_logprobs one `dict(zip(...))`, no Logprob object made. Each token's alternatives
are most likely first already (the sampler's top-k), so the first num_top are the num_top most likely,
as the per-token path's sort finds them. A plain list of Logprob (the echoed prompt's, tests) takes the
per-token path; both give the same objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import itemgetter

from model_optimizer.runtime.engine.detokenizer import TokenOffsets, TokenTexts
from model_optimizer.runtime.engine.logprob_list import LogprobList
from model_optimizer.runtime.engine.outputs import Logprob
from model_optimizer.runtime.server.protocol import SamplingFields
from model_optimizer.runtime.server.protocol_outputs import ChatLogprobs, ChatTokenLogprob, TopLogprob

MIN_LOGPROB = -9999.0  # JSON has no -inf
_isfinite = math.isfinite
_by_value = itemgetter(1)


def tokens_as_ids(body: SamplingFields, default: bool) -> bool:
    """Whether logprobs name tokens "token_id:N": the request's return_tokens_as_token_ids, else the server's."""
    return default if body.return_tokens_as_token_ids is None else body.return_tokens_as_token_ids


def finite(value: float) -> float:
    return value if _isfinite(value) else MIN_LOGPROB


def _finite_columns(logprobs: LogprobList) -> tuple[list[float], list[float]]:
    """The chosen tokens' logprobs and the alternatives', -inf (any non-finite value) as MIN_LOGPROB."""
    chosen, top = logprobs.logprobs.tolist(), logprobs.top_logprobs.tolist()
    if _isfinite(sum(chosen) + sum(top)):  # logprobs are never large: only a non-finite one makes it so
        return chosen, top
    return [finite(v) for v in chosen], [finite(v) for v in top]


def completion_logprobs_dict(
    texts: TokenTexts, logprobs: Sequence[Logprob], offsets: TokenOffsets, num_top: int
) -> dict:
    """CompletionLogprobs as the plain dict a stream chunk serializes (no model per chunk: see streaming.py);
    `offsets` places the tokens in the completion's text (and moves on past them)."""
    if isinstance(logprobs, LogprobList):
        return _completion_columns(texts, logprobs, offsets, num_top)
    tokens, token_logprobs, top_logprobs = [], [], []
    keys, key = texts.key_cache, texts.key
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
    starts = offsets.take([lp.token_id for lp in logprobs])
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": starts}


def _completion_columns(texts: TokenTexts, logprobs: LogprobList, offsets: TokenOffsets, num_top: int) -> dict:
    """completion_logprobs_dict of columns: a chosen token not among the num_top first is added last."""
    token_ids, top_ids = logprobs.token_ids.tolist(), logprobs.top_ids.tolist()
    chosen, values = _finite_columns(logprobs)
    get = texts.key_cache.__getitem__
    try:
        keys, own = list(map(get, top_ids)), list(map(get, token_ids))
    except KeyError:  # tokens named for the first time: decoded once, then every request finds them
        keys, own = list(map(texts.key, top_ids)), list(map(texts.key, token_ids))
    if len(token_ids) == 1:  # a stream's usual chunk: one token
        k = min(len(keys), num_top)
        top = dict(zip(keys[:k], values[:k]) if k < len(keys) else zip(keys, values))
        top.setdefault(own[0], chosen[0])
        tokens = own if texts.named else [None]
        return {
            "tokens": tokens,
            "token_logprobs": chosen,
            "top_logprobs": [top],
            "text_offset": offsets.take(token_ids),
        }
    tops = []
    a = 0
    for n, key, value in zip(logprobs.num_top, own, chosen):
        top = dict(zip(keys[a : a + min(n, num_top)], values[a : a + min(n, num_top)]))
        top.setdefault(key, value)
        tops.append(top)
        a += n
    tokens = texts.many(token_ids)
    return {"tokens": tokens, "token_logprobs": chosen, "top_logprobs": tops, "text_offset": offsets.take(token_ids)}


def chat_logprobs(texts: TokenTexts, logprobs: Sequence[Logprob], num_top: int) -> ChatLogprobs:
    content = []
    for lp in logprobs:
        token = texts(lp.token_id)
        top = [TopLogprob(token=texts(t), logprob=finite(v), bytes=texts.bytes_of(t)) for t, v in _top(lp, num_top)]
        content.append(
            ChatTokenLogprob(
                token=token, logprob=finite(lp.logprob), bytes=texts.bytes_of(lp.token_id), top_logprobs=top
            )
        )
    return ChatLogprobs(content=content)


def chat_logprobs_dict(texts: TokenTexts, logprobs: Sequence[Logprob], num_top: int) -> dict:
    """ChatLogprobs as the plain dict a stream chunk serializes; the same fields, in the same order."""
    if isinstance(logprobs, LogprobList):
        return _chat_columns(texts, logprobs, num_top)
    content = []
    for lp in logprobs:
        token = texts(lp.token_id)
        if token is None:  # as the model would refuse it: chat has a tokenizer (its template needs one)
            raise ValueError("chat logprobs need token texts, and this model has no tokenizer")
        top = []
        for t, v in _top(lp, num_top):
            text = texts(t)
            top.append({"token": text, "logprob": finite(v), "bytes": texts.bytes_of(t)})
        content.append(
            {"token": token, "logprob": finite(lp.logprob), "bytes": texts.bytes_of(lp.token_id), "top_logprobs": top}
        )
    return {"content": content}


def _chat_columns(texts: TokenTexts, logprobs: LogprobList, num_top: int) -> dict:
    """chat_logprobs_dict of columns."""
    if texts.tokenizer is None:  # as the model would refuse it: chat has a tokenizer (its template needs one)
        raise ValueError("chat logprobs need token texts, and this model has no tokenizer")
    token_ids, top_ids = logprobs.token_ids.tolist(), logprobs.top_ids.tolist()
    chosen, values = _finite_columns(logprobs)
    get, get_bytes = texts.cache.__getitem__, texts.bytes_cache.__getitem__
    try:
        top_texts, top_bytes = list(map(get, top_ids)), list(map(get_bytes, top_ids))
        own_texts, own_bytes = list(map(get, token_ids)), list(map(get_bytes, token_ids))
    except KeyError:  # tokens named for the first time
        top_texts, top_bytes = list(map(texts, top_ids)), list(map(texts.bytes_of, top_ids))
        own_texts, own_bytes = list(map(texts, token_ids)), list(map(texts.bytes_of, token_ids))
    entries = [{"token": t, "logprob": v, "bytes": b} for t, v, b in zip(top_texts, values, top_bytes)]
    content = []
    a = 0
    for token, value, data, n in zip(own_texts, chosen, own_bytes, logprobs.num_top):
        top = entries[a : a + min(n, num_top)]
        content.append({"token": token, "logprob": value, "bytes": data, "top_logprobs": top})
        a += n
    return {"content": content}


def _top(lp: Logprob, num_top: int) -> list[tuple[int, float]]:
    """The num_top most likely (stable: ties keep their order, as sorting by -logprob did)."""
    return sorted(lp.top.items(), key=_by_value, reverse=True)[:num_top]


PromptLogprobsList = list["dict[int, Logprob] | None"]


def prompt_logprobs_json(texts: TokenTexts, prompt_logprobs: PromptLogprobsList) -> list[dict | None]:
    """vLLM's prompt_logprobs field: per position null or {"token id": {logprob, rank, decoded_token}} (the
    token's text, also where logprobs name tokens by id, as vLLM's)."""
    return [
        None
        if entry is None
        else {
            str(t): {"logprob": finite(lp.logprob), "rank": lp.rank, "decoded_token": texts.text(t)}
            for t, lp in entry.items()
        }
        for entry in prompt_logprobs
    ]


def echo_logprobs_dict(
    texts: TokenTexts, prompt_token_ids: list[int], prompt_logprobs: PromptLogprobsList, num_top: int, echo: str
) -> dict:
    """The prompt's part of an echoed choice's logprobs (completions' shape): its first token with null
    logprob and null top_logprobs, as OpenAI writes it, then each scored token with its num_top most likely.
    `echo`: the prompt's text as the choice echoes it; text_offset indexes it. A first token the tokenizer
    added (a BOS, whose text the echo does not hold) takes no width, and no offset passes the echo's end,
    where the generated tokens' offsets start."""
    first = texts(prompt_token_ids[0])
    first_text = texts.text(prompt_token_ids[0]) or ""
    scored = [
        Logprob(t, entry[t].logprob, entry[t].rank, {u: lp.logprob for u, lp in entry.items()})
        for t, entry in zip(prompt_token_ids[1:], prompt_logprobs[1:])
        if entry is not None
    ]
    offsets = TokenOffsets(texts, len(first_text) if echo.startswith(first_text) else 0)
    rest = completion_logprobs_dict(texts, scored, offsets, num_top)
    end = len(echo)
    return {
        "tokens": [first, *rest["tokens"]],
        "token_logprobs": [None, *rest["token_logprobs"]],
        "top_logprobs": [None, *rest["top_logprobs"]],
        "text_offset": [0, *(min(at, end) for at in rest["text_offset"])],
    }


def join_logprobs_dicts(head: dict, tail: dict | None) -> dict:
    """Completions' logprobs of the echoed prompt followed by those of the generated tokens."""
    return head if tail is None else {key: head[key] + tail[key] for key in head}
