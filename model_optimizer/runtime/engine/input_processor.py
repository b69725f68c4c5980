"""Before the core loop: a prompt becomes token ids, checked once against the model.

Every way in (LLM.generate, the server, `mopt generate`) goes through these functions, so the
rules "ids lie in the vocabulary" and "the prompt leaves room for one output token" are written
here and nowhere else; the scheduler adds only what depends on its own limits (the KV-cache size,
the step budget without chunked prefill).
"""

from __future__ import annotations

from typing import Any, Protocol

from model_optimizer.runtime.sampling_params import SamplingParams


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def check_token_ids(token_ids: list[int], vocab_size: int) -> list[int]:
    """The ids themselves, once each is an integer in [0, vocab_size) and there is at least one."""
    bad = next((t for t in token_ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size), None)
    if bad is not None:
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
        "documents",
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
"""apply_chat_template's own arguments: a caller's template kwargs may not override them."""


def chat_text(
    tokenizer: Any,
    messages: list[dict],
    template: str | None = None,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """A conversation rendered through a chat template (`template`, else the tokenizer's) as prompt text.

    ValueError saying what is wrong when there is no template, the template fails on these messages, or
    it renders nothing. The one way every caller (LLM.chat, the server, `mopt generate`, the start-up
    check of a --chat-template) turns messages into text."""
    template = template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError("the tokenizer has no chat template")
    extra = {
        k: v
        for k, v in (template_kwargs or {}).items()
        if k not in RESERVED_TEMPLATE_KWARGS and isinstance(v, (str, int, float, bool))
    }
    try:
        text = tokenizer.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
    except Exception as exc:  # noqa: BLE001 - a template error comes from the messages it was given
        raise ValueError(f"the chat template failed on these messages: {str(exc)[:300]}") from None
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the chat template produced no text for these messages")
    return text


def check_prompt_fits(num_prompt_tokens: int, max_model_len: int) -> None:
    """A prompt must leave room in the context for at least one output token."""
    if num_prompt_tokens >= max_model_len:
        raise ValueError(
            f"prompt has {num_prompt_tokens} tokens, more than max_model_len allows "
            f"({max_model_len} including at least one output token)"
        )


def resolve_max_tokens(num_prompt_tokens: int, params: SamplingParams, max_model_len: int) -> int:
    """The request's output limit: its max_tokens capped by what the context leaves (all of it for None).

    Whether the prompt fits at all is the scheduler's check (Scheduler.check_fits), made as it queues it."""
    room = max_model_len - num_prompt_tokens
    return room if params.max_tokens is None else min(params.max_tokens, room)
