"""Tool calls whose arguments the model writes as key/value tags, not JSON: GLM-4.5/4.6 and Qwen3-Coder.

- `glm45`: `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` per argument (newlines
  between them), then `</tool_call>`.
- `qwen3_coder`: `<tool_call>`, `<function=NAME>`, per argument `<parameter=K>` with the value on lines of
  its own and `</parameter>`, then `</function>` and `</tool_call>`.

The server writes the arguments' JSON text itself, and only ever extends it (tool_parsers.py): `{"K": `
once a key is whole, the value once its closing tag has arrived (a half-written value is never shown),
`}` once the call ends. A value arrives as raw text and becomes a JSON string, unless the tool's
parameters schema types it as something else (number, boolean, object ...: then it is read as JSON,
or as a Python literal, falling back to a string when it reads as neither), or the schema says nothing
and it reads as a JSON object, array, number or boolean.

A marker with no call behind it (no name, or one with a space: `Use <tool_call> tags ...`) is text, as in
vLLM. Text the format does not expect between a call's arguments is skipped once the next argument or the
call's end tag has arrived; until then, or where the next call's marker comes first, the reading of that
call stops there and nothing after it becomes a call.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field

from model_optimizer.runtime.server.text_scans import TextScans, arriving, skip_ws
from model_optimizer.runtime.server.tool_parsers import (
    PartialCall,
    ToolParser,
    ToolView,
    _content_before,
)


def json_text(value: object) -> str | None:
    """`value` as JSON text, or None for what JSON cannot hold (sets, bytes, NaN, complex numbers ...)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def literal_json(source: str) -> str | None:
    """The Python literal in `source` (`True`, `{'a': (1, 2)}` ...) as JSON text, or None if it is not one."""
    try:
        with warnings.catch_warnings():  # the model's "\\q" is no reason to warn in the server's log
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            return json_text(ast.literal_eval(source.strip()))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


_NOT_JSON = object()


def _loads(raw: str) -> object:
    try:
        return json.loads(raw, parse_constant=lambda name: _NOT_JSON)  # NaN and Infinity are not JSON
    except (ValueError, RecursionError):
        return _NOT_JSON


def _types(schema: object) -> set[str]:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()


def value_json(raw: str, schema: object) -> str:
    """The JSON text of an argument the model wrote as raw text, typed by its parameter's schema."""
    types = _types(schema)
    if types == {"string"}:
        return json.dumps(raw, ensure_ascii=False)
    value = _loads(raw)
    if "string" in types or not types:  # a string is allowed: only unmistakable JSON values become values
        typed = value is not _NOT_JSON and isinstance(value, (dict, list, int, float, bool))
        return json.dumps(value if typed else raw, ensure_ascii=False)
    if value is not _NOT_JSON and (text := json_text(value)) is not None:
        return text
    return literal_json(raw) or json.dumps(raw, ensure_ascii=False)


@dataclass
class KeyValueCall:
    """One call as read so far: its name once whole, its arguments as (key, where, raw value) triples."""

    name: str | None = None
    pairs: list[tuple[str, int, str | None]] = field(default_factory=list)
    """Keys in order, each with where its tag starts and its raw value, None while it has not all arrived."""
    end: int | None = None
    """Index past the call once it has ended (the arguments are whole), else None."""
    broken: bool = False
    """No name, and what follows the marker cannot become one: the marker is text."""

    def named(self, name: str, whole: bool) -> bool:
        """Take `name` (surrounding whitespace aside) for the call's once it is whole (`whole`: its end has
        arrived), non-empty and free of spaces; otherwise the call is broken where it can never become one (a
        space, or an empty whole name). Whether the call has its name."""
        name = name.strip()
        spaced = _SPACE.search(name) is not None
        if whole and name and not spaced:
            self.name = name
            return True
        self.broken = spaced or whole
        return False


class KeyValueParser(ToolParser):
    """Calls in `<tool_call>` tags whose arguments are key/value tags; subclasses read one call."""

    START = "<tool_call>"

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.properties: dict[str, dict] = {}
        """Per tool name: its parameters schema's properties, which type the raw values."""
        for tool in self.tools:
            function = tool.get("function") or {}
            properties = (function.get("parameters") or {}).get("properties")
            if isinstance(function.get("name"), str) and isinstance(properties, dict):
                self.properties[function["name"]] = properties

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        first = -1
        calls: list[PartialCall] = []
        at = scans.find(self.START, 0)
        while at != -1:
            call = self.read_call(scans, at + len(self.START))
            if call.name is None and (call.broken or final):  # no call behind this marker: it is text, as in vLLM
                at = scans.find(self.START, at + len(self.START))
                continue
            first = at if first == -1 else first
            if call.name is None:
                break  # its name is arriving
            calls.append(PartialCall(call.name, self._arguments(scans, call), call.end is not None))
            at = scans.find(self.START, call.end) if call.end is not None else -1
        return ToolView(_content_before(text, first, first != -1, final, self.START), calls)

    def read_call(self, scans: TextScans, i: int) -> KeyValueCall:
        """The call whose body starts at text[i], as far as it has arrived and keeps to the format."""
        raise NotImplementedError

    def next_tag(self, scans: TextScans, j: int, tags: tuple[str, ...]) -> int | None:
        """Where the next of `tags` (an argument's opening tag, the call's end tag) begins, reading a call's
        arguments from text[j]: j itself, or past text the format does not expect there once one of them has
        arrived before any next call's marker; None until then, or while one may be arriving at j (nothing
        more of the call is read)."""
        text = scans.text
        if any(text.startswith(tag, j) for tag in tags):
            return j
        if any(arriving(text, j, tag) for tag in tags):
            return None
        found = _first_of(scans, j, (*tags, self.START))
        return None if found is None or text.startswith(self.START, found) else found

    def _arguments(self, scans: TextScans, call: KeyValueCall) -> str:
        """The arguments' JSON text so far: a prefix of the whole call's, whatever arrives next."""
        schemas = self.properties.get(call.name or "", {})
        text = "{"
        for k, (key, at, raw) in enumerate(call.pairs):
            text += (", " if k else "") + json.dumps(key, ensure_ascii=False) + ": "
            if raw is None:
                return text
            text += scans.cached(at, value_json, raw, schemas.get(key))
        return text + "}" if call.end is not None else text


_SPACE = re.compile(r"\s")


def _first_of(scans: TextScans, i: int, markers: tuple[str, ...]) -> int | None:
    """Where the first of `markers` starts in text[i:], or None if none has arrived."""
    found = [at for m in markers if (at := scans.find(m, i)) != -1]
    return min(found) if found else None


class Glm45Parser(KeyValueParser):
    name = "glm45"
    END = "</tool_call>"
    KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"

    def read_call(self, scans: TextScans, i: int) -> KeyValueCall:
        text = scans.text
        call = KeyValueCall()
        i = skip_ws(text, i)
        j = _first_of(scans, i, ("\n", self.KEY, self.END))
        if not call.named(text[i:j] if j is not None else text[i:], j is not None):
            return call
        while True:
            j = self.next_tag(scans, skip_ws(text, j), (self.KEY, self.END))
            if j is None:
                return call
            if text.startswith(self.END, j):
                call.end = j + len(self.END)
                return call
            key_end = scans.find(self.KEY_END, j)
            if key_end == -1:
                return call
            key, at = text[j + len(self.KEY) : key_end].strip(), j
            call.pairs.append((key, at, None))
            j = skip_ws(text, key_end + len(self.KEY_END))
            value_end = scans.find(self.VALUE_END, j) if text.startswith(self.VALUE, j) else -1
            if value_end == -1:
                return call
            call.pairs[-1] = (key, at, text[j + len(self.VALUE) : value_end].strip())
            j = value_end + len(self.VALUE_END)


class Qwen3CoderParser(KeyValueParser):
    name = "qwen3_coder"
    FUNCTION, FUNCTION_END, PARAMETER, PARAMETER_END = "<function=", "</function>", "<parameter=", "</parameter>"

    def read_call(self, scans: TextScans, i: int) -> KeyValueCall:
        text = scans.text
        call = KeyValueCall()
        j = skip_ws(text, i)
        if not text.startswith(self.FUNCTION, j):
            call.broken = not arriving(text, j, self.FUNCTION)  # text, not a call arriving
            return call
        name_end = scans.find(">", j)
        if not call.named(text[j + len(self.FUNCTION) : name_end if name_end != -1 else len(text)], name_end != -1):
            return call
        j = name_end + 1
        while True:
            j = self.next_tag(scans, skip_ws(text, j), (self.PARAMETER, self.FUNCTION_END))
            if j is None:
                return call
            if text.startswith(self.FUNCTION_END, j):
                call.end = j + len(self.FUNCTION_END)
                return call
            key_end = scans.find(">", j)
            if key_end == -1:
                return call
            key, at = text[j + len(self.PARAMETER) : key_end].strip(), j
            call.pairs.append((key, at, None))
            # a value ends at its closing tag, or (the tag left out) where the next parameter or the end begins
            stop = _first_of(scans, key_end + 1, (self.PARAMETER_END, self.PARAMETER, self.FUNCTION_END))
            if stop is None:
                return call
            call.pairs[-1] = (key, at, _one_newline_off(text[key_end + 1 : stop]))
            j = stop + len(self.PARAMETER_END) if text.startswith(self.PARAMETER_END, stop) else stop


def _one_newline_off(value: str) -> str:
    """The value between the newlines Qwen3-Coder writes around it (a code value keeps its own)."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


class SeedOssParser(Qwen3CoderParser):
    """Seed-OSS: Qwen3-Coder's calls in `<seed:tool_call>` tags."""

    name = "seed_oss"
    START = "<seed:tool_call>"
