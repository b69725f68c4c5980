"""What a chat request's `tools` and `tool_choice` make the server do, as vLLM does it.

- `none`: the tools are rendered into the prompt (the chat template decides how), nothing is parsed.
- `auto` (the default when tools are given): the model writes calls in its own format, read back by the
  parser the server was started with (`--enable-auto-tool-choice --tool-call-parser NAME`, tool_parsers.py);
  without those flags it is a 400, as in vLLM. finish_reason is "tool_calls" when calls were found. When a
  tool sets `strict: true` and the format can frame a call (hermes, deepseek_v3, deepseek_v31), the output is a
  structural tag: free text, and once the model writes the format's call marker, one call of one of the
  tools in the format, its arguments valid under the tool's schema (the others' under any object).
- `required`: the output is constrained to a JSON list of one or more calls ({"name", "parameters"}), each
  valid against its tool's parameters schema (one call only with parallel_tool_calls false);
  finish_reason "tool_calls".
- a named function: the output is constrained to that function's parameters schema and becomes its one
  call's arguments (no call when the output ended before them, as in vLLM); finish_reason "stop", as OpenAI
  reports a forced function.
- under `--tool-call-parser openai` (gpt-oss), `required` and a named function constrain the turn to
  gpt-oss's own call instead (harmony.call_grammar: its analysis, then one call to one of the tools).
- `allowed_tools` (OpenAI's): the prompt shows every tool, but only the listed ones may be called. Mode
  `required` is `required` over those tools; mode `auto` is `auto` with the calls constrained (a structural
  tag of the allowed tools, strict ones under their schemas, as for strict tools), which needs a format
  that frames a call (else a 400). Listing every tool is plain `auto` / `required`.
A tool without `parameters` takes none: its arguments are `{}`.
OpenAI's custom tools (input text, free or in a Lark or regex grammar) are shown to the template as functions
of one string, `input` (protocol_structured._as_function); named in tool_choice, the whole output is the
input under its grammar (custom_constraint); their calls are answered as custom calls (chat_output.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.harmony import NEXT_MESSAGE, HarmonyToolParser, call_grammar, opened_message
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from model_optimizer.runtime.server.protocol_structured import AllowedToolsChoice
from model_optimizer.runtime.server.state import ServerState
from model_optimizer.runtime.server.tool_parser_registry import PARSERS
from model_optimizer.runtime.server.tool_parsers import NamedCustomParser, NamedParser, RequiredParser, ToolParser
from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.schema_walk import rebuilt

NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def parameters_of(tool: Any) -> dict:
    """A tool's parameters schema: none given is no arguments (OpenAI's function without parameters); the
    empty schema `{}` is any arguments object (JSON Schema's reading of it, as vLLM takes it)."""
    parameters = tool.function.parameters
    if parameters is None:
        return NO_PARAMETERS
    if "type" not in parameters:  # arguments are an object: a root anyOf may not let a string through
        return {**parameters, "type": "object"}
    return parameters


@dataclass
class ToolPlan:
    template_tools: list[dict] | None = None
    """The tools as the chat template sees them (OpenAI's shape)."""
    parser: ToolParser | None = None
    constraint: StructuredOutputs | None = None
    finish_with_tool_calls: bool = False
    """finish_reason "tool_calls" when the output holds calls and the engine stopped it."""
    binding: bool = False
    """The constraint is what tool_choice asks (required, a named function, allowed_tools): a constraint of
    the request's own cannot replace it, as it replaces strict tools' under auto."""
    forces_call: bool = False
    """The output is nothing but calls (required, a named function): a response_format or guided field of the
    request would shape content there is none of, so it is ignored, as vLLM does and OpenAI accepts both."""
    turn_tools: list[tuple[str, dict]] | None = None
    """gpt-oss's forced call: the tools (name, parameters schema) whose constraint for_prompt makes."""

    @property
    def reasoning_end(self) -> str:
        """Set where the constraint holds the model's reasoning too (gpt-oss's turn before a call): it is not
        put after the reasoning parser's block, and a thinking budget forces this instead of the parser's end
        tag."""
        return NEXT_MESSAGE if self.turn_tools is not None else ""

    def for_prompt(self, prompt: str | None, encode: Callable[[str], list[int]]) -> ToolPlan:
        """The plan for an output after `prompt`: a forced gpt-oss call's constraint depends on whether the
        prompt left a message open, and spells its headers as `encode` (the model's tokenizer) does."""
        if self.turn_tools is None:
            return self
        try:
            grammar = call_grammar(self.turn_tools, opened_message(prompt), encode)
        except ValueError as exc:  # a schema integer the grammar engine cannot keep
            raise APIError(400, f"tools: {exc}", "tools") from None
        return dataclasses.replace(self, constraint=StructuredOutputs.grammar(grammar))


def as_template_tools(tools: list[Any]) -> list[dict]:
    """The request's tools as the chat template gets them (OpenAI's function shape, unset fields left out; a
    custom tool as the function of one string it is shown as)."""
    return [{"type": "function", "function": t.function.model_dump(exclude_none=True, by_alias=True)} for t in tools]


def tool_plan(state: ServerState, body: ChatCompletionRequest) -> ToolPlan:
    """The plan for the request's tools; 400 for a tool_choice the tools or the server cannot honour."""
    tools = body.tools or []
    choice = body.tool_choice
    if not tools:
        # as vLLM and OpenAI: any choice but "none" needs the tools (an empty list takes "auto": no calls)
        if (
            choice == "required"
            or (choice is not None and not isinstance(choice, str))
            or (choice == "auto" and body.tools is None)
        ):
            raise APIError(400, "tool_choice needs tools: give the functions the model may call", "tool_choice")
        return ToolPlan([] if body.tools is not None else None)  # [] reaches the template, as vLLM passes it
    names = [t.function.name for t in tools]
    if len(set(names)) != len(names):
        raise APIError(400, "tool names must be unique", "tools")
    for tool in tools:  # a call's arguments are a JSON object (OpenAI refuses any other parameters type too)
        kind = parameters_of(tool).get("type", "object")
        if kind not in ("object", ["object"]):
            raise APIError(
                400,
                f"tool {tool.function.name!r}: parameters must be a JSON Schema of type object (a call's arguments "
                f"are a JSON object), got type {kind!r}",
                "tools",
            )
    plan = _plan(state, body, tools, as_template_tools(tools))
    if plan.parser is not None:
        plan.parser.custom = frozenset(t.function.name for t in tools if t.type == "custom")
        plan.parser.history_ids = tuple(call.id for m in body.messages for call in m.tool_calls or [])
    return plan


def _plan(state: ServerState, body: ChatCompletionRequest, tools: list[Any], template_tools: list[dict]) -> ToolPlan:
    choice = body.tool_choice
    if isinstance(choice, AllowedToolsChoice):
        return _allowed_plan(state, body, choice, template_tools)
    if choice is None or choice == "auto":
        return _auto_plan(state, tools, template_tools)
    if choice == "none":
        return ToolPlan(template_tools)
    if choice == "required":
        return _required_plan(state, tools, template_tools, body.parallel_tool_calls)
    return _named_plan(state, tools, template_tools, choice)


def _named_plan(state: ServerState, tools: list[Any], template_tools: list[dict], choice: Any) -> ToolPlan:
    """A named tool_choice: the output is the function's arguments, or the custom tool's input."""
    kind = choice.type
    name = getattr(choice, kind).name
    tool = next((t for t in tools if t.function.name == name), None)
    if tool is None:
        raise APIError(400, f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    if tool.type != kind:
        raise APIError(400, f"tool_choice names {name!r} as a {kind} tool, but it is a {tool.type} tool", "tool_choice")
    if kind == "custom":
        parser = _with_server_ids(state, NamedCustomParser(name))
        return ToolPlan(template_tools, parser, custom_constraint(tool.custom), binding=True, forces_call=True)
    if _harmony(state):
        return _harmony_call_plan(state, [tool], template_tools, finish_with_tool_calls=False)
    parser = _with_server_ids(state, NamedParser(name))
    return ToolPlan(template_tools, parser, StructuredOutputs.json(parameters_of(tool)), binding=True, forces_call=True)


def custom_constraint(custom: Any) -> StructuredOutputs | None:
    """What a custom tool's format makes of the whole output: its Lark grammar or regex; None for free text."""
    grammar = custom.format.grammar if custom.format is not None else None
    if grammar is None:
        return None
    if grammar.syntax == "regex":
        return StructuredOutputs.regex(grammar.definition)
    definition = grammar.definition
    if "%llguidance" not in definition:  # says Lark: a grammar field is Lark or GBNF, guessed, and a Lark rule
        definition = "%llguidance {}\n" + definition  # written `?start:` or `!start:` was taken for GBNF
    return StructuredOutputs.grammar(definition)


def _allowed_plan(
    state: ServerState, body: ChatCompletionRequest, choice: AllowedToolsChoice, template_tools: list[dict]
) -> ToolPlan:
    """tool_choice allowed_tools: every tool in the prompt, calls only to the listed ones."""
    tools = body.tools or []
    listed = {t.tool_name for t in choice.allowed_tools.tools}
    unknown = sorted(listed - {t.function.name for t in tools})
    if unknown:
        raise APIError(
            400, f"tool_choice.allowed_tools names {unknown[0]!r}, which is not among the tools", "tool_choice"
        )
    allowed = [t for t in tools if t.function.name in listed]
    if choice.allowed_tools.mode == "required":
        return _required_plan(state, allowed, template_tools, body.parallel_tool_calls)
    if len(allowed) == len(tools):  # every tool: plain auto
        return _auto_plan(state, tools, template_tools)
    parser = _auto_parser(state, template_tools)
    constraint = _framed_calls(allowed, parser)
    if constraint is None:
        raise APIError(
            400,
            f"tool_choice allowed_tools with mode auto constrains the model's calls, which the "
            f"{state.config.tool_call_parser!r} tool-call format cannot frame; use mode required, or list every tool",
            "tool_choice",
        )
    return ToolPlan(template_tools, parser, constraint, finish_with_tool_calls=True, binding=True)


def _auto_plan(state: ServerState, tools: list[Any], template_tools: list[dict]) -> ToolPlan:
    """tool_choice auto: the model's own format read back, strict tools' calls framed where it can be."""
    parser = _auto_parser(state, template_tools)
    return ToolPlan(template_tools, parser, _strict_calls(tools, parser), finish_with_tool_calls=True)


def _required_plan(state: ServerState, tools: list[Any], template_tools: list[dict], parallel: bool) -> ToolPlan:
    """tool_choice required (over `tools`): the output is a JSON list of calls to them."""
    lark = next((t.function.name for t in tools if _lark_custom(t)), None)
    if lark is not None:
        raise APIError(
            400,
            f"custom tool {lark!r} takes input in a Lark grammar, which cannot be enforced inside the JSON list "
            f'of calls that tool_choice "required" constrains: name it in tool_choice instead',
            "tool_choice",
        )
    if _harmony(state):
        return _harmony_call_plan(state, tools, template_tools, finish_with_tool_calls=True)
    parser = _with_server_ids(state, RequiredParser())
    constraint = StructuredOutputs.json(_calls_schema(tools, parallel))
    return ToolPlan(template_tools, parser, constraint, finish_with_tool_calls=True, binding=True, forces_call=True)


def _harmony(state: ServerState) -> bool:
    """The server reads gpt-oss's harmony format (`--tool-call-parser openai`)."""
    return state.config.tool_call_parser == HarmonyToolParser.name


def _harmony_call_plan(
    state: ServerState, tools: list[Any], template_tools: list[dict], finish_with_tool_calls: bool
) -> ToolPlan:
    """A forced call in gpt-oss's own format (harmony.call_grammar: its reasoning, then one call, whose
    `<|call|>` ends the turn), read back by the `openai` parser; the constraint is made for the prompt
    (ToolPlan.for_prompt)."""
    parser = PARSERS[HarmonyToolParser.name](template_tools)
    parser.forced = True
    return ToolPlan(
        template_tools,
        parser,
        finish_with_tool_calls=finish_with_tool_calls,
        binding=True,
        forces_call=True,
        turn_tools=[(t.function.name, parameters_of(t)) for t in tools],
    )


def _lark_custom(tool: Any) -> bool:
    custom = tool.custom
    return custom is not None and custom.format is not None and getattr(custom.format.grammar, "syntax", "") == "lark"


def _with_server_ids(state: ServerState, parser: ToolParser) -> ToolParser:
    """A forced call's parser giving ids in the form of the server's --tool-call-parser (Mistral's templates
    take back only their own nine-character ids, Kimi-K2's write `functions.NAME:INDEX`), whatever the
    tool_choice."""
    name = state.config.tool_call_parser
    if name:
        parser.call_id = PARSERS[name].call_id  # type: ignore[method-assign]
    return parser


def _auto_parser(state: ServerState, tools: list[dict]) -> ToolParser:
    config = state.config
    if not config.enable_auto_tool_choice or not config.tool_call_parser:
        raise APIError(
            400,
            'tool_choice "auto" (the default with tools) needs the server started with --enable-auto-tool-choice '
            'and --tool-call-parser NAME; or send tool_choice "required", "none" or a named function',
            "tool_choice",
        )
    return PARSERS[config.tool_call_parser](tools)  # formats with untyped arguments read the tools' types


def _strict_calls(tools: list[Any], parser: ToolParser) -> StructuredOutputs | None:
    """With tool_choice auto, a structural tag holding every call to the tools' schemas, when one of the
    tools is strict and the parser's format frames a call; None otherwise (the calls go unconstrained)."""
    if not any(t.function.strict for t in tools):
        return None
    return _framed_calls(tools, parser)


def _framed_calls(tools: list[Any], parser: ToolParser) -> StructuredOutputs | None:
    """A structural tag whose structures are calls to `tools` in the parser's format (a strict tool's
    arguments under its schema, another's under any object); None when the format cannot frame a call."""
    structures, triggers = [], []
    for tool in tools:
        frame = parser.call_frame(tool.function.name)
        if frame is None:
            return None
        trigger, begin, end = frame
        schema = parameters_of(tool) if tool.function.strict else {"type": "object"}
        structures.append({"begin": begin, "schema": schema, "end": end})
        triggers.append(trigger)
    return StructuredOutputs.structural_tag(structures, sorted(set(triggers)), whitespace_flexible=True)


def _calls_schema(tools: list[Any], parallel: bool) -> dict:
    """A JSON list of calls, each the name of one tool and arguments valid for it. Each tool's parameters
    schema moves under the root's $defs (its own $defs beside it, renamed), so the `#/$defs/...`
    references of a schema written as a document of its own (pydantic's) still resolve."""
    defs: dict[str, Any] = {}
    options = []
    for i, tool in enumerate(tools):
        prefix = f"tool{i}"  # the parameters' name; its definitions `tool{i}_defs_NAME`, `tool{i}_definitions_NAME`
        parameters = parameters_of(tool)
        renamed = functools.partial(_renamed_ref, prefix=prefix)
        if isinstance(parameters.get("$id"), str):  # references through its own $id are local ones
            parameters = _with_refs(parameters, functools.partial(_local_ref, base=parameters["$id"].rstrip("#")))
        for key in DEFINITIONS:
            held = parameters.get(key, {})
            if not isinstance(held, dict):
                raise APIError(400, f"tool {tool.function.name!r}: parameters.{key} must be an object", "tools")
            for name, sub in held.items():
                defs[f"{prefix}_{key.lstrip('$')}_{name}"] = _with_refs(_unrooted(sub), renamed)
        defs[prefix] = _with_refs({k: v for k, v in _unrooted(parameters).items() if k not in DEFINITIONS}, renamed)
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": tool.function.name},
                    "parameters": {"$ref": f"#/$defs/{prefix}"},
                },
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
        )
    items = options[0] if len(options) == 1 else {"anyOf": options}
    schema: dict = {"type": "array", "items": items, "minItems": 1, "$defs": defs}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def _unrooted(schema: Any) -> Any:
    """A schema without what made it a document of its own: under the root's $defs, an `$id` would make its
    `#/...` references resolve against itself, not the root that now holds its definitions."""
    if not isinstance(schema, dict):
        return schema
    return {k: v for k, v in schema.items() if k not in ("$id", "$schema")}


DEFINITIONS = ("$defs", "definitions")
"""Where a schema keeps its definitions (2019-09's name and draft 7's): each keeps its own namespace."""


def _with_refs(node: Any, rewrite: Callable[[str], str]) -> Any:
    """A copy of a schema with each `$ref` (never one inside data) as `rewrite` gives it."""
    return rebuilt(node, functools.partial(_ref_rewritten, rewrite=rewrite))


def _ref_rewritten(node: dict, rewrite: Callable[[str], str]) -> dict:
    if isinstance(node.get("$ref"), str):
        node["$ref"] = rewrite(node["$ref"])
    return node


def _local_ref(ref: str, base: str) -> str:
    """A reference through the schema's own `$id` (`base#/$defs/X`, or `base` alone) as a local one."""
    if ref != base and not ref.startswith(base + "#"):
        return ref
    return ref[len(base) :] or "#"


def _renamed_ref(ref: str, prefix: str) -> str:
    """A local reference pointed at its target's new name under the root: the parameters as `prefix`, a
    definition as `prefix_defs_NAME` or `prefix_definitions_NAME`."""
    local = next((k for k in DEFINITIONS if ref.startswith(f"#/{k}/")), None)
    if local is not None:  # a definition: beside the parameters under the root's $defs
        return f"#/$defs/{prefix}_{local.lstrip('$')}_" + ref[len(local) + 3 :]
    if ref == "#" or ref.startswith("#/"):  # into the parameters schema itself, now a definition
        return f"#/$defs/{prefix}" + ref[1:]
    return ref
