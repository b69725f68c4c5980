"""Stream chunks built from plain dicts (ChunkTemplate) are the chunks pydantic would write.

The streaming formats serialize each chunk's choices as plain dicts instead of pydantic models (the
per-chunk cost is paid batch-size times per engine step). These tests hold them to the models' JSON,
byte for byte."""

from __future__ import annotations

import json
import math
import random

import pytest

from model_optimizer.runtime.engine.logprob_list import LogprobList
from model_optimizer.runtime.engine.outputs import CompletionOutput, Logprob
from model_optimizer.runtime.server.chat_format import ChatFormat
from model_optimizer.runtime.server.logprobs import (
    TokenOffsets,
    TokenTexts,
    chat_logprobs,
    chat_logprobs_dict,
    completion_logprobs_dict,
    finite,
)
from model_optimizer.runtime.server.protocol import CompletionRequest
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from model_optimizer.runtime.server.protocol_outputs import (
    ChatCompletionChunk,
    ChatStreamChoice,
    CompletionChoice,
    CompletionLogprobs,
    CompletionResponse,
    DeltaMessage,
)
from model_optimizer.runtime.server.routes.completions import CompletionFormat
from model_optimizer.runtime.server.streaming import ChoiceDelta, ChunkTemplate, sse

TEXTS = ["", "plain", 'quote " backslash \\ slash /', "new\nline\ttab\r\x00\x1f\x7f", "naïve 日本語 😀 \u2028"]
ODD_NAME = 'tiny "choices":[] \\ model'
"""A served model name holding the marker text and characters JSON escapes."""


class Tokenizer:
    """Token id -> its text: enough for TokenTexts (logprobs name tokens by their text)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(TEXTS[i % len(TEXTS)] or "∅" for i in ids)


def logprobs(ids: list[int]) -> list[Logprob]:
    return [Logprob(t, -0.1 * (t + 1), 1, {t: -0.1 * (t + 1), t + 1: -1e-7, t + 2: -9999.0}) for t in ids]


def completions(with_logprobs: bool) -> list[CompletionOutput]:
    outs = []
    for i, text in enumerate(TEXTS):
        ids = [i, i + 1][: i % 3]
        finish, stop = [(None, None), ("stop", 2), ("stop", "</s>"), ("length", None), ("abort", None)][i]
        outs.append(CompletionOutput(i % 2, text, ids, logprobs(ids) if with_logprobs else None, finish, stop))
    return outs


def as_deltas(outputs: list[CompletionOutput]) -> list[list[ChoiceDelta]]:
    """Single-choice chunks, plus one chunk with every choice (n > 1, several prompts)."""
    singles = [[ChoiceDelta(i % 2, c, i % 2 == 0)] for i, c in enumerate(outputs)]
    return singles + [[ChoiceDelta(i % 2, c, i < 2) for i, c in enumerate(outputs)]]


def reference_completion_logprobs(
    texts: TokenTexts, logprobs: list[Logprob], text_offset: int, num_top: int
) -> CompletionLogprobs:
    """Completions' logprobs as they were built before chunks became plain dicts: the reference."""
    out = CompletionLogprobs()
    for lp in logprobs:
        token = texts(lp.token_id)
        out.tokens.append(token)
        out.token_logprobs.append(finite(lp.logprob))
        top = {}
        for t, v in sorted(lp.top.items(), key=lambda kv: -kv[1])[:num_top]:
            text = texts(t)
            top[f"token_id:{t}" if text is None else text] = finite(v)
        text = texts(lp.token_id)
        top.setdefault(f"token_id:{lp.token_id}" if text is None else text, finite(lp.logprob))
        out.top_logprobs.append(top)
        out.text_offset.append(text_offset)
        text_offset += len(token or "")
    return out


def test_completion_logprobs_match_the_reference():
    texts, rng = TokenTexts(Tokenizer()), random.Random(0)
    for _ in range(200):
        ids = [rng.randrange(8) for _ in range(rng.randint(0, 4))]
        lps = [
            Logprob(t, rng.choice([-0.5, -math.inf]), 1, {rng.randrange(8): rng.choice([-0.5, -1.0, -math.inf])})
            for t in ids
        ]
        for lp in lps:
            lp.top.update({rng.randrange(8): rng.choice([-0.5, -2.0]) for _ in range(3)})
        num_top, offset = rng.randint(0, 5), rng.randint(0, 9)
        want = reference_completion_logprobs(texts, lps, offset, num_top)
        assert CompletionLogprobs(**completion_logprobs_dict(texts, lps, TokenOffsets(texts, offset), num_top)) == want
        none = TokenTexts(None)
        got = CompletionLogprobs(**completion_logprobs_dict(none, lps, TokenOffsets(none, offset), num_top))
        assert got == reference_completion_logprobs(none, lps, offset, num_top)


def expected_completion(fmt: CompletionFormat, deltas: list[ChoiceDelta], at: dict) -> str:
    """What the chunk was when each was a pydantic model; `at`: per (prompt, choice), where its next token's
    text starts (the echo's length at first), moved on."""
    choices = []
    for d in deltas:
        c, echo = d.completion, fmt.echo[d.prompt_index]
        lp = None
        key = (d.prompt_index, c.index)
        start = at.setdefault(key, len(echo))
        if c.logprobs is not None:
            lp = reference_completion_logprobs(fmt.texts, c.logprobs, start, fmt.num_top)
            at[key] = start + sum(len(t or "") for t in lp.tokens) if fmt.texts.tokenizer is not None else start
        choices.append(
            CompletionChoice(
                index=d.prompt_index * fmt.n + c.index,
                text=(echo if d.first else "") + c.text,
                logprobs=lp,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
                token_ids=list(c.token_ids) if fmt.with_token_ids else None,
            )
        )
    return sse(fmt.base.model_copy(update={"choices": choices}))


def expected_chat(fmt: ChatFormat, deltas: list[ChoiceDelta]) -> str | None:
    """The chunk pydantic would write; a choice with no text, finish, logprobs or token ids (a token that
    ends inside a character) is left out, and a chunk with no choice left is not sent."""
    choices = []
    for d in deltas:
        c = d.completion
        lp = chat_logprobs(fmt.texts, c.logprobs, fmt.num_top) if c.logprobs is not None else None
        if not (c.text or c.finished() or lp or fmt.with_token_ids):
            continue
        choices.append(
            ChatStreamChoice(
                index=c.index,
                delta=DeltaMessage(content=c.text) if c.text else DeltaMessage(),
                logprobs=lp,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
                token_ids=list(c.token_ids) if fmt.with_token_ids else None,
            )
        )
    return sse(fmt.base.model_copy(update={"choices": choices})) if choices else None


def check(event: bytes | None, want: str | None) -> None:
    if want is None:
        assert event is None
        return
    got = event.decode()
    assert got.startswith("data: ") and got.endswith("\n\n")
    assert json.loads(got[6:]) == json.loads(want[6:])
    assert got == want


@pytest.mark.parametrize("with_logprobs", [False, True])
@pytest.mark.parametrize("token_ids", [False, True])
@pytest.mark.parametrize("tokenizer", [Tokenizer(), None])
def test_completion_chunks_match_the_models(with_logprobs, token_ids, tokenizer):
    body = CompletionRequest(
        prompt=["a", "b"], n=2, stream=True, return_token_ids=token_ids, logprobs=2 if with_logprobs else None
    )
    fmt = CompletionFormat(body, ["echo é\n", ""], "cmpl-1", ODD_NAME, TokenTexts(tokenizer))
    at: dict = {}
    for deltas in as_deltas(completions(with_logprobs)):
        check(fmt.chunk(deltas), expected_completion(fmt, deltas, at))


@pytest.mark.parametrize("with_logprobs", [False, True])
@pytest.mark.parametrize("token_ids", [False, True])
def test_chat_chunks_match_the_models(with_logprobs, token_ids):
    body = ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}],
        n=2,
        stream=True,
        return_token_ids=token_ids,
        logprobs=with_logprobs,
        top_logprobs=2 if with_logprobs else None,
    )
    fmt = ChatFormat(body, "chatcmpl-1", ODD_NAME, TokenTexts(Tokenizer()))
    for deltas in as_deltas(completions(with_logprobs)):
        check(fmt.chunk(deltas), expected_chat(fmt, deltas))


@pytest.mark.parametrize(
    "base",
    [
        CompletionResponse(id="cmpl-x", model=ODD_NAME, choices=[]),
        ChatCompletionChunk(id="chatcmpl-x", model=ODD_NAME, choices=[]),
    ],
)
def test_template_keeps_every_field_of_the_base(base):
    choice = {"index": 0, "text": "x"}
    event = ChunkTemplate(base).event([choice]).decode()
    want = base.model_dump()
    want["choices"] = [choice]
    assert json.loads(event[6:]) == want
    assert event.endswith("}\n\n")


def sampled_logprobs(rng: random.Random, num_tokens: int, k: int) -> list[Logprob]:
    """Logprobs as the sampler makes them: k alternatives, most likely first (ties kept in id order, as the
    sort by -logprob keeps them), a token of probability 0 left out; ids collide in text (Tokenizer)."""
    out = []
    for _ in range(num_tokens):
        ids = rng.sample(range(12), k)
        values = sorted((rng.choice([-0.5, -1.25, -3.0, -1e-7]) for _ in ids), reverse=True)
        top = {t: v for t, v in zip(ids, values) if rng.random() > 0.1}
        chosen = rng.choice([*top, rng.randrange(12)]) if top else rng.randrange(12)
        out.append(Logprob(chosen, top.get(chosen, rng.choice([-4.0, -math.inf])), rng.randint(1, 9), top))
    return out


@pytest.mark.parametrize("tokenizer", [Tokenizer(), None])
def test_column_logprobs_are_the_per_token_ones(tokenizer):
    """A LogprobList (the engine's columns) gives the dicts a list of the same Logprob gives, chunk or
    response, one token or several, fewer alternatives asked than sent, -inf and shared texts included."""
    texts, rng = TokenTexts(tokenizer), random.Random(1)
    for _ in range(300):
        k = rng.randint(0, 5)
        lps = sampled_logprobs(rng, rng.choice([0, 1, 1, 2, 4]), k)
        columns = LogprobList.of(lps)
        num_top, offset = rng.randint(0, k), rng.randint(0, 9)
        assert completion_logprobs_dict(
            texts, columns, TokenOffsets(texts, offset), num_top
        ) == completion_logprobs_dict(texts, lps, TokenOffsets(texts, offset), num_top)
        if tokenizer is not None:
            assert chat_logprobs_dict(texts, columns, num_top) == chat_logprobs_dict(texts, lps, num_top)


@pytest.mark.parametrize("tokenizer", [Tokenizer(), None])
def test_chunks_of_column_logprobs_match_the_models(tokenizer):
    rng = random.Random(2)
    body = CompletionRequest(prompt=["a", "b"], n=2, stream=True, logprobs=3)
    fmt = CompletionFormat(body, ["echo é\n", ""], "cmpl-1", ODD_NAME, TokenTexts(tokenizer))
    chat_body = ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}], n=2, stream=True, logprobs=True, top_logprobs=3
    )
    chat = ChatFormat(chat_body, "chatcmpl-1", ODD_NAME, TokenTexts(Tokenizer()))
    at: dict = {}  # one stream throughout: its choices' offsets go on
    for _ in range(20):
        outputs = []
        for c in completions(False):
            lps = sampled_logprobs(rng, len(c.token_ids), 3)
            ids = [lp.token_id for lp in lps]
            outputs.append(CompletionOutput(c.index, c.text, ids, LogprobList.of(lps), c.finish_reason, c.stop_reason))
        for deltas in as_deltas(outputs):
            check(fmt.chunk(deltas), expected_completion(fmt, deltas, at))
            check(chat.chunk(deltas), expected_chat(chat, deltas))
