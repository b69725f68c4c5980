"""Before the core: a prompt becomes token ids, checked once against the model, and a CoreRequest.

Every way in (LLM.generate, the server, `mopt generate`) goes through these functions, so the
rules "ids lie in the vocabulary", "the prompt leaves room for one output token" and "the request
fits the cache" (FitLimits) are written here and nowhere else. A frontend checks them before it
sends a request to the core, so a refusal is a ValueError for the caller at once, whichever process
the core runs in; the scheduler checks the limits again as it queues (a bug, not a user error, if
that ever fails).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from model_optimizer.runtime.engine import chat_content, chat_messages
from model_optimizer.runtime.engine.messages import CoreRequest
from model_optimizer.runtime.sampling_params import SamplingParams


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def check_token_ids(token_ids: list[int], vocab_size: int) -> list[int]:
    """The ids themselves, once each is an integer in [0, vocab_size) and there is at least one."""
    bad = next((t for t in token_ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size), None)
    if bad is not None:
        if not isinstance(bad, int) or isinstance(bad, bool):
            raise ValueError(f"prompt token ids must be integers, got {bad!r}")
        raise ValueError(f"prompt token id {bad!r} is outside the vocabulary [0, {vocab_size})")
    if not token_ids:
        raise ValueError("prompt is empty: give at least one token")
    return token_ids


def encode_prompt(tokenizer: Tokenizer | None, prompt: str | list[int], vocab_size: int) -> list[int]:
    """Token ids of a prompt given as text or ids; ids are checked against the vocabulary."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("this model has no tokenizer: give prompts as token ids")
        token_ids = list(tokenizer.encode(prompt))
        if not token_ids:
            raise ValueError("prompt is empty: give at least one token")
        return token_ids
    return check_token_ids(list(prompt), vocab_size)


RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "tools",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "processor_kwargs",
    }
)
"""apply_chat_template's own arguments: a caller's template kwargs do not override them (dropped, as vLLM
drops them; LLM.chat refuses them). Its `documents` (a retrieval template's) pass through, as transformers
and vLLM pass them."""


def chat_template_for(tokenizer: Any, template: str | None = None, tools: list[dict] | None = None) -> str:
    """The template a chat renders with: `template`, else the tokenizer's. Of a tokenizer's named templates
    (additional_chat_templates/, or a list of them in tokenizer_config.json), the one transformers'
    get_chat_template picks: `tool_use` when tools are given (an empty list too) and it has one, else
    `default`; passing the dict on would make transformers fail every render. ValueError when there is none
    to render with."""
    template = template or getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        name = "tool_use" if tools is not None and "tool_use" in template else "default"
        if name not in template:
            raise ValueError(
                f"the tokenizer's named chat templates ({', '.join(sorted(template))}) have no 'default', "
                "the one a chat without tools renders: give a chat template (chat_template, or serve's --chat-template)"
            )
        template = template[name]
    if not template:
        raise ValueError("the tokenizer has no chat template")
    return template


def chat_text(
    tokenizer: Any,
    messages: Sequence[Any],
    template: str | None = None,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
    tools: list[dict] | None = None,
    continue_final_message: bool = False,
    content_format: str = "auto",
) -> str:
    """A conversation rendered through a chat template (chat_template_for: `template`, else the tokenizer's)
    as prompt text. `messages` (dicts, or pydantic messages such as the openai package's) reach the template
    as chat_messages.template_messages makes them: plain dicts, tool-call arguments as objects.
    `tools` (OpenAI's function definitions) are the template's `tools` variable whenever given, an empty
    list too (templates that test `tools is not none` render one), as transformers and vLLM pass them.
    `content_format` (auto, string, openai; chat_content.py): each message's content as one text or as a
    list of text parts, as the template reads it.
    `continue_final_message`: the text ends where the last message's content does (the template's
    end of turn cut off), so the model goes on with that message, as transformers and vLLM do it.

    ValueError saying what is wrong when there is no template, the template fails on these messages, or
    it renders nothing. The one way every caller (LLM.chat, the server, `mopt generate`, the start-up
    check of a --chat-template) turns messages into text."""
    template = chat_template_for(tokenizer, template, tools)
    if continue_final_message and add_generation_prompt:
        raise ValueError("continue_final_message goes on with the last message: set add_generation_prompt false")
    messages = chat_content.shaped(
        chat_messages.template_messages(messages), chat_content.resolved(content_format, template)
    )
    extra = {
        k: v
        for k, v in ((k, _plain(v)) for k, v in (template_kwargs or {}).items())
        if k not in RESERVED_TEMPLATE_KWARGS and isinstance(v, (str, int, float, bool, list, dict, type(None)))
    }
    if continue_final_message:
        messages = _tagged_final_message(messages)
    if tools is not None:
        extra["tools"] = tools
    try:
        text = tokenizer.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
    except Exception as exc:  # noqa: BLE001 - a template error comes from the messages it was given
        raise ValueError(f"the chat template failed on these messages: {str(exc)[:300]}") from None
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the chat template produced no text for these messages")
    return _cut_at_tag(text) if continue_final_message else text


def _plain(value: Any) -> Any:
    """A NumPy scalar (np.bool_(False) from a config or a sweep) as its Python value, which the filter above
    keeps: left as it was, it was dropped, and `enable_thinking` stayed on."""
    return value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value


FINAL_MESSAGE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
"""Appended to the last message's text for continue_final_message, then cut with what follows it: the
text ends exactly where the message does, whatever the template writes after it (transformers 5's way,
so prompts match its apply_chat_template token for token)."""


def _tagged_final_message(messages: list[dict]) -> list[dict]:
    """A copy of `messages` whose last message's text (its content, or the last text part of a list of
    parts) ends with FINAL_MESSAGE_TAG; ValueError when there is no text to go on from."""
    if not messages or not isinstance(messages[-1], Mapping):
        raise ValueError("continue_final_message needs a last message with text to go on from")
    last = dict(messages[-1])
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = content + FINAL_MESSAGE_TAG
    elif isinstance(content, (list, tuple)):
        parts = [dict(p) if isinstance(p, Mapping) else p for p in content]
        for part in reversed(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                part["text"] += FINAL_MESSAGE_TAG
                break
        else:
            raise ValueError("continue_final_message needs a last message with text to go on from")
        last["content"] = parts
    else:
        raise ValueError("continue_final_message needs a last message with text to go on from")
    return [*messages[:-1], last]


def _cut_at_tag(text: str) -> str:
    """`text` up to FINAL_MESSAGE_TAG (and, where the template trimmed the space after it, without the
    whitespace before it); ValueError when the template did not write the last message."""
    at = text.rfind(FINAL_MESSAGE_TAG.strip())
    if at == -1:
        raise ValueError("continue_final_message: the chat template does not write the last message's text")
    return text[:at] if text.startswith(FINAL_MESSAGE_TAG, at) else text[:at].rstrip()


def bad_words_token_ids(tokenizer: Tokenizer, words: Sequence[str]) -> list[list[int]]:
    """vLLM's bad_words as the token sequences the sampler bars: each word without its leading spaces (all
    of it when it is only spaces), alone and after one space (a word in mid-text, in most vocabularies);
    without special tokens, each sequence once. vLLM bars the spelling after a space only when it is as
    many tokens as the bare one; barring it always keeps a word out that a tokenizer spells in fewer
    tokens after a space."""
    sequences: list[list[int]] = []
    for word in words:
        bare = word.lstrip() or word
        for text in (bare, " " + bare):
            ids = list(tokenizer.encode(text, add_special_tokens=False))
            if ids and ids not in sequences:
                sequences.append(ids)
    return sequences


def kept_tokens(truncate_prompt_tokens: int | None, max_model_len: int) -> int | None:
    """How many of a prompt's last tokens truncate_prompt_tokens keeps (-1: the most that leave room for one
    output token), or None: all. ValueError for a count above max_model_len, as vLLM's; a count of
    max_model_len is taken (a shorter prompt is kept whole; one that long is then refused as too long)."""
    if truncate_prompt_tokens is None:
        return None
    if truncate_prompt_tokens == -1:
        return max_model_len - 1
    if not 1 <= truncate_prompt_tokens <= max_model_len:
        raise ValueError(
            f"truncate_prompt_tokens is {truncate_prompt_tokens}; give -1 or 1 to {max_model_len} (max_model_len)"
        )
    return truncate_prompt_tokens


def truncated_prompt(token_ids: list[int], truncate_prompt_tokens: int | None, max_model_len: int) -> list[int]:
    """The prompt's last tokens that truncate_prompt_tokens keeps (kept_tokens); all of them for None."""
    keep = kept_tokens(truncate_prompt_tokens, max_model_len)
    return token_ids if keep is None else token_ids[-keep:]


def check_prompt_fits(num_prompt_tokens: int, max_model_len: int) -> None:
    """A prompt must leave room in the context for at least one output token."""
    if num_prompt_tokens >= max_model_len:
        raise ValueError(
            f"prompt has {num_prompt_tokens} tokens, more than max_model_len allows "
            f"({max_model_len} including at least one output token)"
        )


@dataclass(frozen=True)
class FitLimits:
    """What a request must fit to ever run to completion: checked by the frontend before it sends one to
    the core, and by the scheduler again as it queues it."""

    max_model_len: int
    num_blocks: int
    block_size: int
    max_num_batched_tokens: int
    chunked_prefill: bool = True

    def check(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """ValueError naming the numbers when the prompt plus `max_tokens` outputs could never run."""
        check_prompt_fits(num_prompt_tokens, self.max_model_len)
        if not self.chunked_prefill and num_prompt_tokens > self.max_num_batched_tokens:
            raise ValueError(
                f"prompt has {num_prompt_tokens} tokens and chunked prefill is off: "
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must cover it"
            )
        needed = -(-min(num_prompt_tokens + max_tokens, self.max_model_len) // self.block_size)
        if needed > self.num_blocks:
            raise ValueError(
                f"request needs {needed} KV-cache blocks for {num_prompt_tokens} prompt + {max_tokens} output tokens, "
                f"but the whole cache has {self.num_blocks}"
            )


def resolve_max_tokens(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> int:
    """The request's output limit: its max_tokens capped by what the context leaves (all of it for None).

    Whether the prompt fits at all is the scheduler's check (Scheduler.check_fits), made as it queues it."""
    room = max_model_len - num_prompt_tokens
    return room if params.max_tokens is None else min(params.max_tokens, room)


@dataclass
class InputProcessor:
    """Prompts to CoreRequests: encoded (text) or checked (ids), max_tokens resolved, limits checked."""

    tokenizer: Tokenizer | None
    vocab_size: int
    limits: FitLimits
    client: int = 0
    """The frontend's number, stamped on its requests (the core sends their outputs back there)."""

    def request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        priority: int = 0,
        arrival_time: float | None = None,
    ) -> CoreRequest:
        """ValueError, saying what is wrong, when the prompt is malformed or the request could never fit."""
        if self.tokenizer is None and params.stop:
            raise ValueError("stop strings need a tokenizer and this model has none: use stop_token_ids")
        prompt_token_ids = encode_prompt(self.tokenizer, prompt, self.vocab_size)
        prompt_token_ids = truncated_prompt(prompt_token_ids, params.truncate_prompt_tokens, self.limits.max_model_len)
        if params.bad_words:
            if self.tokenizer is None:
                raise ValueError("bad_words need a tokenizer and this model has none: use bad_words_token_ids")
            barred = bad_words_token_ids(self.tokenizer, params.bad_words)
            params = params.clone(bad_words=None, bad_words_token_ids=[*(params.bad_words_token_ids or []), *barred])
        max_tokens = resolve_max_tokens(len(prompt_token_ids), params, self.limits.max_model_len)
        self.limits.check(len(prompt_token_ids), max_tokens)
        return CoreRequest(
            request_id, prompt_token_ids, params, max_tokens, priority, arrival_time or time.time(), self.client
        )
