"""Pydantic models of the OpenAI API's structured outputs and tools, and of vLLM's `structured_outputs`.

Requests: `response_format` (text, json_object, json_schema, structural_tag), vLLM's `structured_outputs`
object (and its older `guided_*` fields, on SamplingFields), `tools`, `tool_choice`, and the assistant
and tool messages of a conversation that used them. Responses: `tool_calls` on a message or a stream delta.
What the server does with them is in structured.py and tools.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator


class _Request(BaseModel):
    """The base of every request model: unknown fields ignored, known ones strictly typed, null for an
    optional field taken as not given."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        return without_nulls(cls, data)


def without_nulls(model: type[BaseModel], data: Any) -> Any:
    """`data` without the nulls of fields that have a default other than null: a field sent as null takes
    its default, as OpenAI's and vLLM's servers read null for an optional field (`"n": null` is n 1)."""
    if isinstance(data, dict) and None in data.values():
        fields = model.model_fields
        return {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].default is None}
    return data


class JsonSchemaFormat(_Request):
    """response_format.json_schema."""

    name: str = Field(default="response", max_length=256)
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None
    """OpenAI's opt-in to enforcement; here every schema is enforced (a schema the grammar engine cannot
    enforce is refused with a 400 either way)."""


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None
    structures: list[Any] | None = Field(default=None, max_length=4096)
    """structural_tag (vLLM's): [{"begin", "schema", "end"}, ...], checked in structured.py."""
    triggers: list[Any] | None = Field(default=None, max_length=4096)
    format: dict[str, Any] | None = None
    """structural_tag, vLLM's newer form: a tree of formats (runtime/structured/tag_format.py)."""


class StructuredOutputsField(_Request):
    """vLLM's `structured_outputs`: exactly one of json, regex, choice, grammar, json_object, structural_tag."""

    json_: dict[str, Any] | bool | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = Field(default=None, max_length=4096)
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool | None = None
    """Compact JSON (the default here); false allows a bounded run of whitespace between JSON tokens."""
    structural_tag: Any = None
    whitespace_pattern: str | None = None
    """A regular expression for the whitespace between JSON tokens (json, json_object, structural_tag)."""
    disable_additional_properties: bool | None = None
    """With json: `additionalProperties: false` on every object schema that does not say
    (server/structured.py `closed`)."""


class FunctionDefinition(_Request):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[\w.:/\-]+$")
    """Letters and digits of any script, `_ . : / -` (what the tool-call formats can carry: no spaces, quotes
    or tag brackets)."""
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Request):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Request):
    name: str = Field(max_length=128)


class NamedToolChoice(_Request):
    type: Literal["function"] = "function"
    function: NamedFunction


class AllowedTools(_Request):
    mode: Literal["auto", "required"]
    """auto: the model may call one of `tools` or answer; required: it calls one or more of them."""
    tools: list[NamedToolChoice] = Field(min_length=1, max_length=128)


class AllowedToolsChoice(_Request):
    """OpenAI's tool_choice that lets the model call only some of the request's tools, all of which the
    prompt still shows (`{"type": "allowed_tools", "allowed_tools": {"mode": ..., "tools": [...]}}`)."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class ToolCallFunction(BaseModel):
    name: str
    arguments: str
    """The arguments as JSON text (the model's, as written)."""


class ToolCall(BaseModel):
    """A tool call in a response, or in an assistant message a client sends back."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(default="", max_length=256)
    type: Literal["function"] = "function"
    function: ToolCallFunction

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """A call sent back with "id": null (as some clients write it): the default."""
        return without_nulls(cls, data)


class DeltaFunction(BaseModel):
    name: str | None = None
    arguments: str | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaToolCall(BaseModel):
    """A tool call's news in a stream chunk: id, type and name first, then pieces of its arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunction | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}
