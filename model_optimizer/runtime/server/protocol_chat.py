"""Pydantic models of chat requests: messages and their text parts, what a request may tell the chat
template (also /tokenize's, protocol_tokenize.py), tool_choice, and the chat completion request itself
(also what a Responses API request becomes, protocol_responses.py). Strict as every request model
(protocol.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from model_optimizer.runtime.engine.chat_content import TEXT_PARTS
from model_optimizer.runtime.server.body import in_slices
from model_optimizer.runtime.server.protocol import INT64_MAX, SamplingFields, checked_format_name
from model_optimizer.runtime.server.protocol_structured import (
    AllowedToolsChoice,
    ChatTool,
    NamedCustomChoice,
    NamedToolChoice,
    ToolCall,
    _Request,
)


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

    def check_format_name(self) -> None:
        """APIError (400) for a json_schema response_format whose name breaks OpenAI's rule, the one the
        Responses API's text.format.name follows (FORMAT_NAME); a name left out is structured.py's 400."""
        rf = self.response_format
        name = rf.json_schema.name if rf is not None and rf.type == "json_schema" and rf.json_schema else None
        if name is not None:
            checked_format_name(name, "response_format.json_schema.name")

    def unsupported_field(self) -> str | None:
        """OpenAI's deprecated function-calling fields (use tools and tool_choice)."""
        if self.functions:
            return "functions"
        if self.function_call not in (None, "none", "auto"):
            return "function_call"
        return None
