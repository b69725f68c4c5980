"""Request inputs to token ids, off the event loop: plain prompts, token-id prompts, chat messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.engine import input_processor
from model_optimizer.runtime.engine.input_processor import chat_template_for, chat_text
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol_chat import ChatMessage
from model_optimizer.runtime.server.protocol_structured import CUSTOM_INPUT
from model_optimizer.runtime.server.state import ServerState


@dataclass
class Prompt:
    """One prompt ready for the engine."""

    token_ids: list[int]
    text: str | None = None
    """The prompt as text when it was given as text (used by echo)."""


def prompt_list(prompt: str | list) -> list[str | list[int]]:
    """OpenAI's four prompt shapes -> a list of prompts, each text or token ids."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt is empty: give a string, a list of strings or token ids", "prompt")
    if isinstance(prompt[0], int):  # validated as one shape (protocol.PromptInput): the first item tells
        return [prompt]
    return list(prompt)


def kept_tokens(state: ServerState, truncate_prompt_tokens: int | None) -> int | None:
    """How many of a prompt's last tokens a request keeps (input_processor.kept_tokens), or None: all, a
    longer prompt being refused."""
    try:
        return input_processor.kept_tokens(truncate_prompt_tokens, state.model.max_model_len)
    except ValueError as exc:
        raise APIError(400, str(exc), "truncate_prompt_tokens") from None


async def tokenize_prompts(
    state: ServerState, prompts: list[str | list[int]], keep: int | None = None, add_special_tokens: bool = True
) -> list[Prompt]:
    """Each prompt's token ids (its text, kept for echo unless `keep` cut it); `keep`: see kept_tokens;
    `add_special_tokens`: whether the tokenizer adds its own (a BOS) to a text prompt."""
    if len(prompts) > state.config.max_prompts:
        raise APIError(400, f"got {len(prompts)} prompts; at most {state.config.max_prompts} per request", "prompt")
    out = []
    for prompt in prompts:
        if isinstance(prompt, str):
            token_ids = await encode(state, prompt, add_special_tokens, keep=keep)
            out.append(Prompt(token_ids, prompt if keep is None or len(token_ids) < keep else None))
        else:
            out.append(Prompt(await checked_token_ids(state, prompt[-keep:] if keep else prompt)))
    return out


INLINE_IDS = 4096
"""Token-id prompts up to this length are checked on the event loop; longer ones in a worker thread."""


async def checked_token_ids(state: ServerState, token_ids: list[int]) -> list[int]:
    """The ids, once they fit max_model_len (known from their count alone, before any id is looked at)
    and each is in the vocabulary."""
    max_model_len = state.model.max_model_len
    if len(token_ids) >= max_model_len:
        raise APIError(
            400,
            f"the prompt has {len(token_ids)} tokens, but max_model_len is {max_model_len} "
            "(prompt plus at least one output token)",
            "prompt",
        )
    if len(token_ids) <= INLINE_IDS:
        return check_token_ids(state, token_ids)
    return await state.run_blocking(check_token_ids, state, token_ids)


def check_token_ids(state: ServerState, token_ids: list[int]) -> list[int]:
    try:
        return input_processor.check_token_ids(list(token_ids), state.model.vocab_size)
    except ValueError as exc:
        raise APIError(400, str(exc), "prompt") from None


NO_TOKENIZER = "this model has no tokenizer: send the prompt as token ids (a list of integers)"


async def encode(
    state: ServerState,
    text: str,
    add_special_tokens: bool,
    param: str = "prompt",
    allow_empty: bool = False,
    for_generation: bool = True,
    keep: int | None = None,
) -> list[int]:
    """Token ids of `text`, only the last `keep` when given. For generation, a text that cannot fit
    max_model_len is refused by its length before tokenizing, unless it is to be cut; /tokenize
    (`for_generation=False`) counts any text the body cap lets in."""
    tokenizer = state.model.tokenizer
    if tokenizer is None:
        raise APIError(400, NO_TOKENIZER, param)
    _check_utf8(text)
    if for_generation and keep is None:
        check_text_fits(state, text, param)
    token_ids = await state.run_blocking(lambda: list(tokenizer.encode(text, add_special_tokens=add_special_tokens)))
    if not token_ids and not allow_empty:
        raise APIError(400, "prompt is empty: give at least one token", "prompt")
    return token_ids[-keep:] if keep else token_ids


def check_text_fits(state: ServerState, text: str, param: str) -> None:
    """Refuse a text that cannot fit max_model_len by its length alone, before tokenizing it (seconds for MBs)."""
    bound = state.token_bound
    if bound is None:
        return
    fewest, max_model_len = bound.min_tokens(text), state.model.max_model_len
    if fewest >= max_model_len:
        raise APIError(
            400,
            f"the prompt has {len(text)} characters, so at least {fewest} tokens (no token of this tokenizer "
            f"stands for more than {bound.longest_token} characters), but max_model_len is {max_model_len} "
            "(prompt plus at least one output token)",
            param,
        )


def _check_utf8(text: str) -> None:
    """JSON may carry lone surrogates (\\ud800) that are not text; refuse them before the tokenizer does."""
    at = not_utf8_at(text)
    if at is not None:
        raise APIError(400, f"input is not valid Unicode text (lone surrogate at position {at})")


def message_dicts(messages: list[ChatMessage], developer_as_system: bool = False) -> list[dict[str, Any]]:
    """Messages as chat templates read them: text content (a list of text parts stays one, for chat_text to
    shape as the template reads it), and the tool calls of an assistant message (their arguments as OpenAI
    sends them, JSON text: chat_text makes them objects, as it does LLM.chat's). `developer_as_system`: a
    `developer` message (OpenAI's newer name for the system's) goes as `system`, for a template that has
    no branch for that role (most open models': it would drop the instruction, or refuse it)."""
    out = []
    for message in messages:
        content = message.content
        text = content or ""
        if isinstance(content, list):
            content = [{"type": "text", "text": part.text} for part in content]
            text = "".join(part["text"] for part in content)
        role = "system" if developer_as_system and message.role == "developer" else message.role
        item: dict[str, Any] = {"role": role, "content": content}  # None: chat_text shapes it
        if message.name:
            item["name"] = message.name
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
        reasoning = message.reasoning if message.reasoning is not None else message.reasoning_content
        if reasoning is not None:  # under both names: templates read one or the other
            item["reasoning"] = item["reasoning_content"] = reasoning
        if message.tool_calls:
            item["tool_calls"] = [_template_call(call) for call in message.tool_calls]
        _check_utf8(item["role"] + text + item.get("name", "") + str(item.get("tool_calls", "")))
        out.append(item)
    return out


def _template_call(call: Any) -> dict[str, Any]:
    """A call in the function shape templates read; a custom tool's as the function of one string it is
    shown as."""
    if call.type == "custom":
        name, arguments = call.custom.name, {CUSTOM_INPUT: call.custom.input}
    else:
        name, arguments = call.function.name, call.function.arguments
    return {"id": call.id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def chat_prompt(
    state: ServerState,
    messages: list[ChatMessage],
    add_generation_prompt: bool,
    template_kwargs: dict[str, Any] | None,
    add_special_tokens: bool = False,
    for_generation: bool = True,
    tools: list[dict] | None = None,
    continue_final_message: bool = False,
    keep: int | None = None,
) -> Prompt:
    """Render messages (and `tools`, an empty list too: None only when the request has none, as vLLM passes
    them) through the chat template (--chat-template or the tokenizer's) and tokenize (only the last `keep`
    tokens when given)."""
    tokenizer = state.model.tokenizer
    if tokenizer is None:
        raise APIError(
            400,
            "this model has no tokenizer, so chat messages cannot be rendered: use /v1/completions with token ids",
            "messages",
        )
    defaults = state.config.default_chat_template_kwargs
    if defaults:
        template_kwargs = {**defaults, **(template_kwargs or {})}
    try:
        template = chat_template_for(tokenizer, state.chat_template, tools)
    except ValueError as exc:
        raise APIError(
            400, f"{exc}; use /v1/completions, or start the server with --chat-template FILE", "messages"
        ) from None
    try:  # in a worker thread, the messages too: a chat may hold hundreds of thousands
        text = await state.run_blocking(
            lambda: chat_text(
                tokenizer,
                message_dicts(messages, developer_as_system="developer" not in template),
                template,
                add_generation_prompt,
                template_kwargs,
                tools,
                continue_final_message,
                state.config.chat_template_content_format,
            )
        )
    except ValueError as exc:  # the template failed on the messages the client sent
        raise APIError(400, str(exc), "messages") from None
    token_ids = await encode(state, text, add_special_tokens, "messages", for_generation=for_generation, keep=keep)
    return Prompt(token_ids, text)
