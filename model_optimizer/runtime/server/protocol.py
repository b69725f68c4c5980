"""Pydantic models of the OpenAI API (the subset we serve), with bounds the engine can honour.

Static bounds live here (they also shape /openapi.json); caps that depend on the server's
configuration (n, logprobs, stop strings, prompts) are checked in `server.params`.
Unknown fields are ignored, as OpenAI clients send newer fields than any server knows. Known
fields are strict: `"max_tokens": "5"`, `"n": true` or `"stream": "yes"` are 400s naming the field,
not guesses (pydantic's lax mode would turn true into 1 and "5" into 5). One lax reading is kept, as
vLLM's: a whole-number float in an integer field (`"max_tokens": 5.0`, `"seed": 1e3`) is that integer
(`WholeFloats`); 5.5 stays a 400.
"""

from __future__ import annotations

import time
import types
import typing
import uuid
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, model_serializer, model_validator

from model_optimizer.runtime.engine.chat_content import TEXT_PARTS
from model_optimizer.runtime.server.body import in_slices
from model_optimizer.runtime.server.protocol_structured import (
    AllowedToolsChoice,
    ChatTool,
    DeltaToolCall,
    NamedCustomChoice,
    NamedToolChoice,
    ResponseFormat,
    StructuredOutputsField,
    ToolCall,
    _Request,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenIds = Annotated[list[TokenId], in_slices()]
Texts = Annotated[list[str], in_slices()]


def _prompt_shape(value: Any) -> str | None:
    """Which of the four prompt shapes `value` is, from its type and first item: validated as that
    one alone, a million token ids cost one pass (a plain union tried each list shape on every item)
    and an error speaks of the shape the client sent."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    if value and isinstance(value[0], str):
        return "texts"
    if value and isinstance(value[0], list):
        return "token_id_lists"
    return "token_ids"


PromptInput = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[Texts, Tag("texts")]
    | Annotated[TokenIds, Tag("token_ids")]
    | Annotated[Annotated[list[TokenIds], in_slices()], Tag("token_id_lists")],
    Discriminator(
        _prompt_shape,
        custom_error_type="prompt_shape",
        custom_error_message="must be a string, a list of strings, a list of token ids or a list of lists of token ids",
    ),
]
"""OpenAI's four prompt (and embedding input) shapes."""


def _tool_choice_kind(value: Any) -> str | None:
    """Which tool_choice shape `value` is: a mode's name, or an object by its type (allowed_tools, a named
    custom tool, else a named function), so that an error speaks of that shape alone."""
    if isinstance(value, str):
        return "mode"
    if isinstance(value, dict):
        return value["type"] if value.get("type") in ("allowed_tools", "custom") else "function"
    return None


ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("mode")]
    | Annotated[NamedToolChoice, Tag("function")]
    | Annotated[NamedCustomChoice, Tag("custom")]
    | Annotated[AllowedToolsChoice, Tag("allowed_tools")],
    Discriminator(
        _tool_choice_kind,
        custom_error_type="tool_choice_shape",
        custom_error_message='must be "none", "auto", "required", a named function or custom tool, or allowed_tools',
    ),
]
"""OpenAI's tool_choice shapes."""


class StreamOptions(_Request):
    include_usage: bool | None = True
    """Send one last chunk with token usage before [DONE]: on when left out of stream_options, off when
    false or null (vLLM's reading)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """Null stays null here: include_usage null is off, as vLLM reads it (left out, it is on)."""
        return data

    continuous_usage_stats: bool = False
    """vLLM's: with include_usage, every chunk also carries the usage so far."""


class WholeFloats(_Request):
    """A request model whose integer fields (and lists of integers) take a float with no fractional part as
    that integer, as vLLM's (pydantic's lax mode) do: `"n": 2.0` is n 2, `"seed": 1e3` is seed 1000. Any other
    float (5.5, NaN, inf), a bool or a string stays the strict 400 naming the field."""

    @model_validator(mode="before")
    @classmethod
    def _whole_floats_as_ints(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        changed = {}
        for name, is_list in _int_fields(cls).items():
            value = data.get(name)
            if is_list and isinstance(value, list) and any(type(v) is float for v in value):
                changed[name] = [_whole(v) for v in value]
            elif not is_list and type(value) is float:
                changed[name] = _whole(value)
        return {**data, **changed} if changed else data


def _whole(value: Any) -> Any:
    """A whole-number float as its int; anything else as it is (for the strict check to refuse)."""
    return int(value) if type(value) is float and value.is_integer() else value


@cache
def _int_fields(model: type[BaseModel]) -> dict[str, bool]:
    """`model`'s fields that take an integer (False) or a list of integers (True), by name. A prompt (one shape
    of several, up to millions of ids) is left strict: scanning it would cost every request."""
    found = {}
    for name, info in model.model_fields.items():
        kinds = [k for k in _members(info.annotation) if k is not type(None)]
        if int in kinds:
            found[name] = False
        elif (
            len(kinds) == 1 and typing.get_origin(kinds[0]) is list and _members(typing.get_args(kinds[0])[0]) == [int]
        ):
            found[name] = True
    return found


def _members(annotation: Any) -> list[Any]:
    """The types an annotation admits, its unions and Annotated unwrapped (`int | None` -> [int, NoneType])."""
    if typing.get_origin(annotation) is Annotated:
        return _members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


class SamplingFields(WholeFloats):
    """Fields shared by completions and chat completions (OpenAI's plus vLLM's extras)."""

    model: str | None = Field(default=None, max_length=512)
    max_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    temperature: float | None = Field(default=None, ge=0.0)
    """vLLM's bound: none above (a high temperature only flattens the distribution); NaN and inf are 400s."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=1024)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | Texts | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)
    logit_bias: dict[str, float] | None = None
    # vLLM extras
    top_k: int | None = Field(default=None, ge=-1, le=1 << 20)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    """vLLM's bound: > 0, none above (as SamplingParams)."""
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    use_beam_search: bool = False
    """vLLM's: answer with the n best beams of a beam search (runtime/beam_search.py) instead of n samples."""
    length_penalty: float = Field(default=1.0, ge=-10.0, le=10.0)
    """vLLM's, with use_beam_search: a beam's summed logprob is divided by its length to this power."""
    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=1024)
    allowed_token_ids: list[TokenId] | None = Field(default=None, max_length=1 << 20)
    """Only these tokens may be sampled."""
    bad_words: list[Annotated[str, Field(min_length=1)]] | None = None
    """Words the output must not contain (tokenized alone and after a space, as vLLM does); capped as stop
    strings are (--max-stop-strings, --max-stop-string-length)."""
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    """vLLM's; passed to SamplingParams, where it changes nothing (the fast tokenizer's text has no spaces of its
    own around special tokens)."""
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: keep only the prompt's last this many tokens (-1: as many as leave room for one output token)
    instead of refusing a longer prompt."""
    prompt_logprobs: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: logprobs of the prompt's tokens and this many alternatives (-1: the whole vocabulary, refused
    like any value past --max-logprobs). Completions return them on each choice (streamed: on its first
    chunk); chat puts them on the response, beside the choices, and (as vLLM) refuses more than 0 with stream."""
    return_token_ids: bool = Field(
        default=False, description="Put the generated token ids on each choice as token_ids (vLLM's field)."
    )
    """Put each choice's generated token ids on it as `token_ids` (vLLM's field); streamed, each chunk
    carries the ids new in it. Always on for a model served without a tokenizer (its text is empty)."""
    return_tokens_as_token_ids: bool | None = None
    """Name each token in logprobs as "token_id:N" (vLLM's field); unset: --return-tokens-as-token-ids."""
    # structured outputs (structured.py): OpenAI's response_format, vLLM's structured_outputs and guided_*
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsField | None = None
    guided_json: dict[str, Any] | bool | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = Field(default=None, max_length=4096)
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    """Ignored: llguidance is the one backend."""
    guided_whitespace_pattern: str | None = None
    """With guided_json: a regular expression for the whitespace between JSON tokens."""


class CompletionRequest(SamplingFields):
    prompt: PromptInput
    max_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)
    """0 only with echo: the prompt comes back alone (with its logprobs when asked), nothing is generated."""
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    add_special_tokens: bool = True
    """vLLM's: the tokenizer adds its special tokens (a BOS) to a text prompt; false for a prompt that holds them."""
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=1024)


class TextPart(_Request):
    type: Literal["text"]
    text: str

    @model_validator(mode="before")
    @classmethod
    def _text_kinds(cls, data: Any) -> Any:
        """The other parts that are text (TEXT_PARTS), as a text part; a part of another type, or without its
        text, says so."""
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            return data
        key = TEXT_PARTS.get(kind)
        if key is None:
            raise ValueError(f"only text content parts are supported ({', '.join(TEXT_PARTS)}), got {kind!r}")
        if not isinstance(data.get(key), str):
            raise ValueError(f"the {kind!r} part needs its text, a string under {key!r}")
        return {"type": "text", "text": data[key]} if kind != "text" else data


class ChatMessage(_Request):
    role: str = Field(max_length=64)
    content: str | Annotated[list[TextPart], in_slices()] | None = None
    name: str | None = Field(default=None, max_length=256)
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=128)
    """An assistant message's calls (sent back with the tools' results in the next request)."""
    tool_call_id: str | None = Field(default=None, max_length=256)
    """A tool message: the call it answers."""
    reasoning: str | None = None
    """An assistant message's thinking, sent back (vLLM's name; reasoning_content is DeepSeek's)."""
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        """As OpenAI: only an assistant's message (one that makes tool calls) may come without content; a
        template would otherwise render the others' null as "None" or as nothing."""
        if self.content is None and self.role in CONTENT_ROLES:
            raise ValueError(f"a {self.role} message needs content")
        return self


CONTENT_ROLES = frozenset({"system", "developer", "user", "tool"})
"""Roles whose messages must carry content."""

ChatMessages = Annotated[list[ChatMessage], in_slices()]


RENDERED_KEYS = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
"""Template variables the server sets from the request itself: chat_template_kwargs may not name them."""


class ChatTemplateFields(_Request):
    """What a request that renders chat messages may tell the chat template."""

    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, Any]] | None = Field(default=None, max_length=1024)
    """vLLM's: documents for a retrieval template (its `documents` variable, as transformers passes them)."""
    chat_template: str | None = None
    """Refused (template_refusal): the server renders with its own template. vLLM takes a request's template
    only from clients its operator trusts (--trust-request-chat-template)."""

    def template_refusal(self) -> tuple[str, str] | None:
        """(message, param) of a 400 for a template field the server does not take, else None."""
        if self.chat_template is not None:
            return (
                "a chat template in the request is not accepted: the server renders with its own "
                "(the model's, or the one it was started with: --chat-template FILE)",
                "chat_template",
            )
        named = sorted(RENDERED_KEYS & set(self.chat_template_kwargs or {}))
        if named:
            return (
                f"chat_template_kwargs may not set {', '.join(named)}: the server renders them from the request",
                "chat_template_kwargs",
            )
        return None

    def template_variables(self) -> dict[str, Any] | None:
        """chat_template_kwargs, with the request's documents."""
        if self.documents is None:
            return self.chat_template_kwargs
        return {**(self.chat_template_kwargs or {}), "documents": self.documents}


class ChatCompletionRequest(SamplingFields, ChatTemplateFields):
    messages: ChatMessages = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """The model goes on with the last message (an assistant's start, a prefill) instead of starting a new
    one; needs add_generation_prompt false (vLLM's)."""
    add_special_tokens: bool = False
    """vLLM's: the tokenizer adds its special tokens to the rendered prompt too (the template usually writes
    them itself, so a BOS would be doubled)."""
    echo: bool = False
    """vLLM's: the answer's content starts with the last message's when that message has the answer's role
    (a prefill the model goes on with), whole and streamed."""
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    """False: one call at most (with tool_choice "required" the output is constrained to one; with "auto"
    the first call the model wrote is returned, as vLLM does)."""
    include_reasoning: bool = True
    """With --reasoning-parser: False drops the reasoning from the response (vLLM's field)."""
    thinking_token_budget: int | None = Field(default=None, ge=0, le=INT64_MAX)
    """With --reasoning-parser: the most tokens the model may think; then its end tag is forced (vLLM's)."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    """Passed to the chat template as `reasoning_effort`; "none" also sets `enable_thinking` false unless
    chat_template_kwargs sets it (vLLM's mapping, for templates such as Qwen3's)."""
    # refused: OpenAI's deprecated predecessors of tools
    functions: list[Any] | None = None
    function_call: str | dict[str, Any] | None = None

    def template_kwargs(self) -> dict[str, Any] | None:
        """chat_template_kwargs with reasoning_effort added as vLLM maps it (the request's own keys win)."""
        if self.reasoning_effort is None:
            return self.template_variables()
        kwargs = {"reasoning_effort": self.reasoning_effort}
        if self.reasoning_effort == "none":
            kwargs["enable_thinking"] = False
        return {**kwargs, **(self.template_variables() or {})}

    def unsupported_field(self) -> str | None:
        """OpenAI's deprecated function-calling fields (use tools and tool_choice)."""
        if self.functions:
            return "functions"
        if self.function_call not in (None, "none", "auto"):
            return "function_call"
        return None


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


class EmbeddingRequest(WholeFloats):
    model: str | None = Field(default=None, max_length=512)
    input: PromptInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = Field(default=None, max_length=512)
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: cut each input to this many tokens (-1: the model's limit) instead of refusing a longer one."""


# ----------------------------------------------------------------- responses
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
    status: Literal["ready", "loading", "draining", "failed"]


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
