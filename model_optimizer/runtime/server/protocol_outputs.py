"""Pydantic models of what the server answers: completions and chat completions (whole, and chat's stream
chunks), their usage and logprobs; /v1/models' cards, /ready's status and the OpenAI error body."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer

from model_optimizer.runtime.server.protocol_structured import DeltaToolCall, ToolCall


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (not computed again)."""


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0
    """Output tokens inside the reasoning block (between its tags, which are not counted)."""


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = Field(default=None, exclude_if=lambda d: d is None)
    """With --enable-prompt-tokens-details (vLLM's flag), as OpenAI's usage."""
    completion_tokens_details: CompletionTokensDetails | None = Field(default=None, exclude_if=lambda d: d is None)
    """Chat with --reasoning-parser: how many of completion_tokens were reasoning, as OpenAI's usage."""


class CompletionLogprobs(BaseModel):
    tokens: list[str | None] = []
    """Token texts; null when the model has no tokenizer (top_logprobs then keys by "token_id:N")."""
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []
    text_offset: list[int] = []


def _token_ids_field() -> Any:
    """`token_ids` of a choice: left out of the JSON unless set (no `"token_ids": null` on every chunk)."""
    return Field(
        default=None,
        exclude_if=lambda ids: ids is None,
        description="Generated token ids (those new in this chunk when streamed); present when the request "
        "set return_token_ids, and always for a model served without a tokenizer.",
    )


class PromptLogprob(BaseModel):
    """One token's entry at one prompt position of vLLM's prompt_logprobs."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="vLLM's: per prompt token, null for the first, then token id -> logprob, rank and text "
        "for the prompt token and the most likely ones; present when the request set prompt_logprobs.",
    )
    token_ids: list[int] | None = _token_ids_field()
    """Generated token ids: all of them in a response, those new in this chunk when streamed. Present when
    the request set return_token_ids, and always for a model served without a tokenizer (its text is
    empty): a stream then has one chunk per engine step that made tokens, so clients can time each."""


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None = None


class ChatResponseMessage(BaseModel):
    role: str = "assistant"
    """--response-role (assistant by default), or the last message's role without a generation prompt."""
    content: str | None = None
    reasoning: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The model's thinking, split from the answer by --reasoning-parser (vLLM's name for it)."""
    reasoning_content: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The same text under DeepSeek's name, which many clients read."""
    tool_calls: list[ToolCall] = Field(default_factory=list, exclude_if=lambda v: not v)


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = _token_ids_field()
    """As CompletionChoice.token_ids."""


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    prompt_logprobs: list[dict[str, PromptLogprob] | None] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="vLLM's: the prompt's logprobs (as CompletionChoice.prompt_logprobs, for the rendered chat "
        "prompt); present when the request set prompt_logprobs.",
    )


class DeltaMessage(BaseModel):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        """Stream deltas carry only what changed (no `"role": null`)."""
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = _token_ids_field()
    """As CompletionChoice.token_ids: the ids new in this chunk."""


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None


class ReadyStatus(BaseModel):
    status: Literal["ready", "loading", "draining", "failed", "unresponsive"]
    """unresponsive: the engine core has left a ping unanswered past MOPT_ENGINE_HANG_TIMEOUT_S (it may answer
    again); failed: the engine has failed and the server is exiting."""


class ModelPermission(BaseModel):
    """vLLM's model permission object (its /v1/models cards carry one): fixed values, nothing is enforced."""

    id: str = Field(default_factory=lambda: f"modelperm-{uuid.uuid4().hex}")
    object: Literal["model_permission"] = "model_permission"
    created: int = Field(default_factory=lambda: int(time.time()))
    allow_create_engine: bool = False
    allow_sampling: bool = True
    allow_logprobs: bool = True
    allow_search_indices: bool = False
    allow_view: bool = True
    allow_fine_tuning: bool = False
    organization: str = "*"
    group: str | None = None
    is_blocking: bool = False


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "model-optimizer"
    root: str | None = None
    parent: str | None = None
    """The base model of a LoRA adapter in vLLM; always null here (no adapters)."""
    max_model_len: int | None = None
    permission: list[ModelPermission] = Field(default_factory=list)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo
