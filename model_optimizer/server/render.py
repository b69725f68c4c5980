"""Engine outputs -> OpenAI response pieces: stream deltas, logprobs, usage, SSE lines."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from model_optimizer.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.engine.request import Logprob
from model_optimizer.server.protocol import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob, UsageInfo

DONE = "data: [DONE]\n\n"
MIN_LOGPROB = -9999.0  # JSON has no -inf


def sse(payload: BaseModel | dict) -> str:
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    return f"data: {data}\n\n"


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
    out = CompletionLogprobs()
    for lp in logprobs:
        token = texts(lp.token_id)
        out.tokens.append(token)
        out.token_logprobs.append(finite(lp.logprob))
        top = {_key(texts, t): finite(v) for t, v in _top(lp, num_top)}
        top.setdefault(_key(texts, lp.token_id), finite(lp.logprob))
        out.top_logprobs.append(top)
        out.text_offset.append(text_offset)
        text_offset += len(token or "")
    return out


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


def _top(lp: Logprob, num_top: int) -> list[tuple[int, float]]:
    return sorted(lp.top.items(), key=lambda kv: -kv[1])[:num_top]


def usage(prompt_token_counts: list[int], outputs: list[RequestOutput | None]) -> UsageInfo:
    prompt_tokens = sum(prompt_token_counts)
    completion_tokens = sum(o.num_output_tokens for o in outputs if o is not None)
    return UsageInfo(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


@dataclass
class Delta:
    text: str
    logprobs: list[Logprob] | None
    text_offset: int
    first: bool


class DeltaTracker:
    """Cumulative completions -> what is new since the last chunk, per choice."""

    def __init__(self) -> None:
        self.sent: dict[int, tuple[int, int]] = {}
        self.done: set[int] = set()

    def delta(self, choice_index: int, completion: CompletionOutput) -> Delta | None:
        """What to send for this choice now, or None when nothing new (or it already finished)."""
        if choice_index in self.done:
            return None
        first = choice_index not in self.sent
        num_chars, num_tokens = self.sent.get(choice_index, (0, 0))
        text = completion.text[num_chars:]
        logprobs = completion.logprobs[num_tokens:] if completion.logprobs is not None else None
        if not text and not logprobs and not completion.finished:
            return None
        self.sent[choice_index] = (max(len(completion.text), num_chars), len(completion.token_ids))
        if completion.finished:
            self.done.add(choice_index)
        return Delta(text, logprobs, num_chars, first)
