"""OpenAI's Responses API request (POST /v1/responses), read as the chat request it amounts to.

A response is one chat completion: `instructions` become a system message, `input` (a text, or items:
messages, the model's earlier function calls and their outputs: responses_input.py) the conversation, `text.format` the
response_format, `tools` (flat function tools) and `tool_choice` the chat ones, `max_output_tokens` the
token bound, `reasoning.effort` chat's reasoning_effort, `include` "message.output_text.logprobs" (with
`top_logprobs`) chat's logprobs. `to_chat` builds that ChatCompletionRequest, so
every check and feature of chat completions applies unchanged. Nothing is stored: `store` is taken and
answered false, and `previous_response_id` or `background` is a 400 saying so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from model_optimizer.runtime.server.errors import APIError, validation_message
from model_optimizer.runtime.server.protocol import checked_format_name
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from model_optimizer.runtime.server.protocol_structured import _Request
from model_optimizer.runtime.server.responses_input import input_messages
from model_optimizer.runtime.structured.params import json_text
from model_optimizer.runtime.structured.vllm_params import closed

PASSED_THROUGH = (
    "seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "ignore_eos",
    "min_tokens",
    "stop_token_ids",
    "bad_words",
    "allowed_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "priority",
    "structured_outputs",
    "thinking_token_budget",
    "chat_template_kwargs",
    "chat_template",
)
"""vLLM's extras a Responses request may carry as well (vLLM takes them there too), checked as chat's:
sampling and detokenizing fields, the scheduling priority, its structured_outputs constraint (with
text.format as well, a 400: one constraint), the thinking budget and the template's kwargs (Qwen3's
`enable_thinking`); a chat_template gets chat's 400. Never dropped: a field left out here would be
silently ignored (the request model ignores unknown fields, as vLLM's)."""


LOGPROBS = "message.output_text.logprobs"
"""The `include` value that asks for the output text's logprobs (`top_logprobs`: how many alternatives each
token has); without it a response has none (`logprobs: []`), as OpenAI's, and none are computed."""
INCLUDABLE = (
    LOGPROBS,
    "reasoning.encrypted_content",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
)
"""OpenAI's values of `include`; only the logprobs change what this server sends (it keeps no encrypted
reasoning, and the others belong to tools it refuses)."""
STORED = (
    ("conversation", "a conversation's items"),
    ("prompt", "a prompt template"),
    ("context_management", "earlier context to compact"),
)
"""Fields that name state kept on OpenAI's side: a 400 each, never silently ignored."""
SEND_ALL = "send the whole conversation as input"


class ReasoningConfig(_Request):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    """Chat's reasoning_effort; "xhigh" and "max" (OpenAI's newest levels) go to templates as "high"."""
    summary: Literal["auto", "concise", "detailed"] | None = None
    """Taken and echoed; the reasoning item carries the whole text of the thinking, not a summary."""


class TextConfig(_Request):
    format: dict[str, Any] | None = None
    """{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "name", "schema", "strict"}."""
    verbosity: Literal["low", "medium", "high"] | None = None
    """Taken and echoed, not used."""


class ResponsesRequest(_Request):
    model: str | None = Field(default=None, max_length=512)
    input: str | Annotated[list[dict[str, Any]], Field(max_length=4096)]
    """A text (bounded by the model's context only) or at most 4,096 items."""
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    """With `include` LOGPROBS: the alternatives each token's logprob comes with; else only echoed."""
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool = False
    store: bool | None = None
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=16
    )
    """OpenAI's bounds: 16 pairs, keys of up to 64 characters, values of up to 512."""
    user: str | None = Field(default=None, max_length=256)
    truncation: Literal["auto", "disabled"] | None = None
    """"disabled" (a prompt too long is a 400, as OpenAI's default); "auto" is a 400: OpenAI drops whole
    input items and keeps the instructions, which cutting tokens from the start would not."""
    include: list[Literal[INCLUDABLE]] | None = None  # type: ignore[valid-type]
    previous_response_id: str | None = None
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    # vLLM's sampling extras (PASSED_THROUGH)
    seed: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = None
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    priority: int | None = None
    structured_outputs: dict[str, Any] | None = None
    thinking_token_budget: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None
    """vLLM's (bounds and meaning: chat's fields of these names)."""

    def refuse_state(self) -> None:
        """APIError (400) for a field that names state kept on OpenAI's side (a stored response, conversation
        or prompt, a background run): nothing is stored here."""
        if self.previous_response_id is not None:
            raise APIError(
                400,
                f"responses are not stored here, so previous_response_id cannot be followed: {SEND_ALL}",
                "previous_response_id",
            )
        if self.background:
            raise APIError(400, "background responses are not supported: nothing is stored to poll", "background")
        for name, what in STORED:
            if getattr(self, name) is not None:
                raise APIError(400, f"{name} is not supported: {what} is not stored here; {SEND_ALL}", name)

    def to_chat(self) -> ChatCompletionRequest:
        """The chat completion this response is; APIError (400) naming the field for what does not translate
        (refuse_state first: its fields are named as this request has them)."""
        if self.truncation == "auto":
            raise APIError(
                400,
                'truncation "auto" is not supported (whole input items would have to be dropped): send a '
                "conversation that fits, or leave truncation disabled",
                "truncation",
            )
        chat: dict[str, Any] = {
            "model": self.model,
            "messages": input_messages(self.instructions, self.input),
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "parallel_tool_calls": self.parallel_tool_calls,
        }
        if self.include and LOGPROBS in self.include:
            chat |= {"logprobs": True, "top_logprobs": self.top_logprobs}
        if self.tools:
            chat["tools"] = [_tool(tool, i) for i, tool in enumerate(self.tools)]
        if self.tool_choice is not None and (self.tools or self.tool_choice != "auto"):  # auto: the default here
            chat["tool_choice"] = _tool_choice(self.tool_choice)
        if self.text is not None and self.text.format is not None:
            chat["response_format"] = _response_format(self.text.format)
        if self.reasoning is not None and self.reasoning.effort is not None:
            chat["reasoning_effort"] = {"xhigh": "high", "max": "high"}.get(
                self.reasoning.effort, self.reasoning.effort
            )
        chat |= {name: getattr(self, name) for name in PASSED_THROUGH if getattr(self, name) is not None}
        chat = {key: value for key, value in chat.items() if value is not None}
        try:
            return ChatCompletionRequest.model_validate(chat)
        except ValidationError as exc:  # param: the first error's field path (routes/responses.py renames it)
            message, _ = validation_message(exc)
            raise APIError(400, message, _field_path(exc.errors()[0]["loc"])) from None


def _tool(tool: dict[str, Any], i: int) -> dict[str, Any]:
    """A flat Responses function or custom tool as chat's nested one; other tool types (web_search,
    file_search, computer use, MCP...) are a 400: they run on OpenAI's side. Without `strict` (or with
    null), a function tool is strict, its schema normalised as OpenAI's Responses API does (objects
    closed, every property required); `strict: false` keeps it as sent, best effort, as chat's default is."""
    if tool.get("type") == "custom":
        return {"type": "custom", "custom": _custom_tool(tool)}
    if tool.get("type") != "function":
        raise APIError(
            400,
            f"tools[{i}]: tools of type {tool.get('type')!r} are not supported; only function and custom tools "
            "(the client runs them) are",
            f"tools[{i}].type",
        )
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
    if tool.get("strict") is None:  # OpenAI's Responses default, unlike chat's: strict, the schema made so
        function["strict"] = True
        if isinstance(function.get("parameters"), dict):
            function["parameters"] = closed(function["parameters"], require_all=True)
    return {"type": "function", "function": function}


def _custom_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses custom tool's fields as chat's `custom` object: its grammar format is flat here
    (`{"type": "grammar", "syntax", "definition"}`), nested there (under `grammar`)."""
    custom = {key: tool[key] for key in ("name", "description", "format") if key in tool}
    fmt = custom.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and "grammar" not in fmt:
        custom["format"] = {"type": "grammar", "grammar": {k: fmt[k] for k in ("syntax", "definition") if k in fmt}}
    return custom


_UNION_BRANCHES = frozenset(("bool", "str", "int", "float", "list", "dict", "none"))


def _field_path(loc: tuple[Any, ...]) -> str:
    """An error's location as the request's field path: up to the first label pydantic gives a union's
    branch (`dict[str,any]`, `bool`), which names a type, not a field."""
    parts: list[str] = []
    for part in map(str, loc):
        if "[" in part or part in _UNION_BRANCHES:
            break
        parts.append(part)
    return ".".join(parts)


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise APIError(
                400, f"tool_choice must be none, auto, required or a function, got {choice!r}", "tool_choice"
            )
        return choice
    if choice.get("type") == "allowed_tools":  # flat here, nested in chat's shape
        tools, mode = choice.get("tools"), choice.get("mode")
        if mode not in ("auto", "required"):
            raise APIError(400, f"tool_choice.mode must be auto or required, got {mode!r}", "tool_choice.mode")
        named = isinstance(tools, list) and all(
            isinstance(t, dict) and t.get("type") in ("function", "custom") and isinstance(t.get("name"), str)
            for t in tools
        )
        if not tools or not named:
            raise APIError(
                400,
                'tool_choice.tools must list function or custom tools: {"type": "function", "name": ...}',
                "tool_choice.tools",
            )
        listed = [{"type": "function", "function": {"name": t["name"]}} for t in tools]  # chat's list: by name
        return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": listed}}
    kind = choice.get("type")
    if kind not in ("function", "custom") or not isinstance(choice.get("name"), str):
        raise APIError(
            400, 'tool_choice must name a function or custom tool: {"type": "function", "name": ...}', "tool_choice"
        )
    return {"type": kind, kind: {"name": choice["name"]}}


def echoed_format(fmt: dict[str, Any] | None) -> dict[str, Any]:
    """`text.format` as a response carries it: the schema an object, however the request sent it (some
    clients send it as JSON text)."""
    if fmt is None or fmt.get("type") != "json_schema":
        return fmt or {"type": "text"}
    spec = _response_format(fmt)["json_schema"]
    return {"type": "json_schema", **{key: value for key, value in spec.items() if value is not None}}


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise APIError(400, f"text.format.type must be text, json_object or json_schema, got {kind!r}", "text.format")
    schema = fmt.get("schema")
    if schema is None:
        raise APIError(
            400, "text.format of type json_schema needs schema, the JSON schema of the output", "text.format"
        )
    if isinstance(schema, str):  # tolerated: some clients send the schema as JSON text
        try:
            schema = json_text(schema, "text.format.schema")
        except ValueError as exc:
            raise APIError(400, str(exc), "text.format.schema") from None
    spec = {"name": _format_name(fmt.get("name")), "schema": schema, "strict": fmt.get("strict")}
    if fmt.get("description") is not None:
        spec["description"] = fmt["description"]
    return {"type": "json_schema", "json_schema": spec}


def _format_name(name: Any) -> str:
    """A json_schema format's name: required, as OpenAI's (the openai client sends a pydantic model's), with
    OpenAI's rule for it (protocol.FORMAT_NAME, chat's too)."""
    if name is None:
        raise APIError(400, "text.format of type json_schema needs name, the name of its schema", "text.format.name")
    return checked_format_name(name, "text.format.name")
