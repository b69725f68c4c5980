"""Pydantic models of vLLM's /tokenize and /detokenize: a prompt, or chat messages rendered through the
chat template, as token ids; token ids as text."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from model_optimizer.runtime.server.body import in_slices
from model_optimizer.runtime.server.protocol import TokenId
from model_optimizer.runtime.server.protocol_chat import ChatMessages, ChatTemplateFields
from model_optimizer.runtime.server.protocol_structured import ChatTool, _Request


class TokenizeRequest(ChatTemplateFields):
    """vLLM's /tokenize: a prompt, or chat messages rendered through the chat template."""

    model: str | None = Field(default=None, max_length=512)
    prompt: str | None = None
    messages: ChatMessages | None = Field(default=None, min_length=1)
    add_special_tokens: bool | None = None
    """Default: true for a prompt, false for messages (the template already writes them)."""
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """With messages: the prompt ends inside the last message, as chat completions render it for a model to
    go on with that message (vLLM's); needs add_generation_prompt false."""
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    """With messages: the tools the template writes into the prompt, as chat completions give them (an empty
    list too)."""
    return_token_strs: bool = False


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    tokens: Annotated[list[TokenId], in_slices(max_length=1 << 20)] = Field(max_length=1 << 20)


class DetokenizeResponse(BaseModel):
    prompt: str
