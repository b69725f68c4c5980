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

    name: str | None = Field(default=None, max_length=256)
    """Required, as OpenAI's API and vLLM require it (a 400 without it, server/structured.py); the openai
    client's `parse` sends the model class's name."""
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


class CustomGrammar(_Request):
    definition: str = Field(min_length=1)
    syntax: Literal["lark", "regex"]


class CustomFormat(_Request):
    """A custom tool's input: free text, or text in a grammar."""

    type: Literal["text", "grammar"]
    grammar: CustomGrammar | None = None

    @model_validator(mode="after")
    def _grammar_with_its_type(self) -> CustomFormat:
        if (self.type == "grammar") != (self.grammar is not None):
            raise ValueError('a format of type "grammar" holds a grammar ({"definition", "syntax"}), "text" none')
        return self


class CustomDefinition(_Request):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[\w.:/\-]+$")
    description: str | None = None
    format: CustomFormat | None = None
    """None: free text."""


class ChatTool(_Request):
    """A tool: a function (its arguments a JSON object), or OpenAI's custom tool (its input is text, free or
    in a Lark or regex grammar), which the model sees as a function of one string parameter, `input`
    (custom_tools.py)."""

    type: Literal["function", "custom"] = "function"
    function: FunctionDefinition = None  # type: ignore[assignment]  # a custom tool's: set from `custom`
    custom: CustomDefinition | None = None

    @model_validator(mode="after")
    def _one_definition(self) -> ChatTool:
        if self.type == "custom":
            if self.custom is None:
                raise ValueError('a tool of type "custom" needs "custom": {"name", "description", "format"}')
            self.function = _as_function(self.custom)
        elif self.function is None:
            raise ValueError('a tool of type "function" needs "function": {"name", "description", "parameters"}')
        return self


CUSTOM_INPUT = "input"
"""The one parameter of the function a custom tool is shown as."""


def _as_function(custom: CustomDefinition) -> FunctionDefinition:
    """The function a custom tool is shown as: one string parameter, its format told in the description
    (and a regex one enforced as the string's pattern wherever calls are constrained). Strict: where the
    tool-call format frames calls, a custom tool's call is always `{"input": "..."}`."""
    grammar = custom.format.grammar if custom.format is not None else None
    text: dict[str, Any] = {"type": "string"}
    if grammar is None:
        told = "free text"
    elif grammar.syntax == "regex":
        text["pattern"] = f"^(?:{grammar.definition})$"  # a JSON schema pattern matches anywhere unanchored
        told = f"text matching the regular expression {grammar.definition}"
    else:
        told = f"text in this Lark grammar:\n{grammar.definition}"
    parameters = {"type": "object", "properties": {CUSTOM_INPUT: text}, "required": [CUSTOM_INPUT]}
    description = "\n\n".join(filter(None, [custom.description, f"Its {CUSTOM_INPUT}: {told}"]))
    return FunctionDefinition(
        name=custom.name, description=description, parameters={**parameters, "additionalProperties": False}, strict=True
    )


class NamedFunction(_Request):
    name: str = Field(max_length=128)


class NamedToolChoice(_Request):
    type: Literal["function"] = "function"
    function: NamedFunction

    @property
    def tool_name(self) -> str:
        return self.function.name


class NamedCustomChoice(_Request):
    """tool_choice naming a custom tool: the output is that tool's input."""

    type: Literal["custom"]
    custom: NamedFunction

    @property
    def tool_name(self) -> str:
        return self.custom.name


class AllowedTools(_Request):
    mode: Literal["auto", "required"]
    """auto: the model may call one of `tools` or answer; required: it calls one or more of them."""
    tools: list[NamedToolChoice | NamedCustomChoice] = Field(min_length=1, max_length=128)


class AllowedToolsChoice(_Request):
    """OpenAI's tool_choice that lets the model call only some of the request's tools, all of which the
    prompt still shows (`{"type": "allowed_tools", "allowed_tools": {"mode": ..., "tools": [...]}}`)."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class ToolCallFunction(BaseModel):
    name: str
    arguments: str
    """The arguments as JSON text (the model's, as written)."""


class ToolCallCustom(BaseModel):
    name: str
    input: str
    """The custom tool's input, as the model wrote it."""


class ToolCall(BaseModel):
    """A tool call in a response, or in an assistant message a client sends back: a function's, or a custom
    tool's (type "custom")."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(default="", max_length=256)
    type: Literal["function", "custom"] = "function"
    function: ToolCallFunction | None = Field(default=None, exclude_if=lambda v: v is None)
    custom: ToolCallCustom | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """A call sent back with "id": null (as some clients write it): the default."""
        return without_nulls(cls, data)

    @model_validator(mode="after")
    def _its_type_given(self) -> ToolCall:
        if getattr(self, self.type) is None:
            raise ValueError(f'a tool call of type "{self.type}" needs its "{self.type}" object')
        return self


class _Delta(BaseModel):
    """A stream delta's object: what is not set this time is left out, not sent as null."""

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaFunction(_Delta):
    name: str | None = None
    arguments: str | None = None


class DeltaCustom(_Delta):
    name: str | None = None
    input: str | None = None


class DeltaToolCall(_Delta):
    """A tool call's news in a stream chunk: id, type and name first, then pieces of its arguments (a custom
    tool's: of its input)."""

    index: int
    id: str | None = None
    type: Literal["function", "custom"] | None = None
    function: DeltaFunction | None = None
    custom: DeltaCustom | None = None
