"""Tool calls read from a model's text: vLLM's `--tool-call-parser` formats, and the two the server constrains.

A parser turns the text generated so far into a `ToolView`: the content a client may see already and
the calls begun so far, each with its name (once complete) and its arguments' JSON text as far as it
has arrived. Views only grow as text arrives (content is appended to, a call's arguments extended, a
name set once), so streaming is a diff of successive views (chat_output.py) and the whole response is
the last view: both give the same calls. Parsers read the text, never token ids. A stream's views read its
text through `TextScans`, whose searches go on where the last view's stopped: each costs about its delta.

- `hermes` (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number;
  the tags may be special tokens (skip_special_tokens off).
- `llama3_json` (Llama 3.1+): the whole output is `{"name": ..., "parameters": {...}}`, calls separated by
  `;`, optionally after `<|python_tag|>`; anything else is content, an object without both keys included.
- `mistral`: `[TOOL_CALLS]` then a JSON list of {"name", "arguments"} objects (or one object), or (newer
  tokenizers) `[TOOL_CALLS]name[ARGS]{...}` per call (`[CALL_ID]id` may follow the name, `[ARGS]` may be
  left out); needs special tokens in the text (skip_special_tokens off).
- `deepseek_v3`, `deepseek_v31`, `kimi_k2` (special-token markers around each call, tool_parsers_deepseek.py),
  `glm45`, `qwen3_coder`, `seed_oss` (arguments as key/value tags, tool_parsers_kv.py), `pythonic` (a Python
  list of calls, tool_parsers_pythonic.py), `xlam` (a JSON list of calls, fenced or tagged, tool_parsers_xlam.py)
  and the JSON formats behind other markers (granite, jamba, minimax, internlm, ...: tool_parsers_tagged.py)
  live beside this module; tool_parser_registry.py names them all.
- `required` (tool_choice "required"): the server constrained the output to a JSON list of {"name",
  "parameters"} objects. `named` (a named tool_choice): the output is the arguments themselves; `named_custom`
  (a named custom tool): the output is the tool's input.

In every format a marker with no call behind it is text, as vLLM has it.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import string
import uuid
from dataclasses import dataclass, field

from model_optimizer.runtime.server.text_scans import TextScans, arriving, skip_ws, string_end

ARGUMENT_KEYS = ("arguments", "parameters")


@dataclass
class PartialCall:
    name: str | None = None
    """Set once the whole name has arrived."""
    arguments: str = ""
    """The arguments' JSON text so far (raw, as the model wrote it)."""
    complete: bool = False
    string_arguments: bool = False
    """The model wrote the arguments as a JSON string holding JSON: only sent once complete, decoded."""
    id: str | None = None
    """The id the model wrote for the call (Kimi-K2's), which the response keeps; None: the server makes one."""
    keyed: bool = False
    """Its JSON object has an arguments (or parameters) key, as far as it has arrived."""


@dataclass
class ToolView:
    content: str = ""
    """Text outside tool calls that is safe to show: a possible start of a call marker is held back."""
    calls: list[PartialCall] = field(default_factory=list)


class ToolParser:
    name = ""
    needs_special_tokens = False
    """Its markers are special tokens: the text must keep them (skip_special_tokens off)."""
    forced = False
    """The output is nothing but calls (a required or named tool_choice): its content is null, cut off or not."""
    custom: frozenset[str] = frozenset()
    """The names of the request's custom tools (tools.py sets them): their calls' arguments are
    `{"input": "..."}`, answered as the custom call's input."""
    raw_input = False
    """A call's arguments are a custom tool's input itself, not JSON holding it (a named custom tool)."""
    history_ids: tuple[str, ...] = ()
    """The ids of the calls the conversation's earlier assistant messages made (tools.py sets them): a tool
    result names its call by id, so the response's calls take others, and ids that count calls (Kimi-K2's
    `functions.NAME:INDEX`) count on from them, as vLLM numbers them."""

    def __init__(self, tools: list[dict] | None = None) -> None:
        self.tools = tools or []
        """The request's tools in OpenAI's shape: formats that write arguments as text need their types."""
        self.scans = TextScans()
        """What the views have scanned of the stream's text so far, resumed by the next view."""

    def for_stream(self) -> ToolParser:
        """This parser with scans of its own, for one stream's views (a request's choices share its parser)."""
        parser = copy.copy(self)
        parser.scans = TextScans()
        return parser

    def view(self, text: str, final: bool) -> ToolView:
        """The view of `text`; `final` when no more text will come (held-back content is released)."""
        raise NotImplementedError

    @staticmethod
    def call_id(name: str, index: int) -> str:
        """A fresh id for the response's call number `index` (from 0), of function `name`: OpenAI's shape."""
        return f"call_{uuid.uuid4().hex[:24]}"

    def call_frame(self, name: str) -> tuple[str, str, str] | None:
        """(trigger, begin, end) around one call of `name`'s JSON arguments in this format, for strict tools
        (a structural tag: once the model writes the trigger, the call is forced to the tool's schema);
        None where the format cannot be framed so (arguments not JSON, or the whole output the call)."""
        return None


# ----------------------------------------------------------------------------------- JSON calls
def call_object(scans: TextScans, i: int) -> tuple[PartialCall, int | None]:
    """The call in the JSON object at text[i] (a name key and an arguments/parameters key, any order) and
    the index past the object, or None while it is incomplete."""
    text = scans.text
    call = PartialCall()
    seen_name = seen_arguments = False
    j = skip_ws(text, i + 1)
    while j < len(text):
        if text[j] == "}":
            call.complete = call.name is not None
            if call.complete and not seen_arguments:
                call.arguments = "{}"  # a call without arguments takes none
            return call, j + 1
        if text[j] == ",":
            j = skip_ws(text, j + 1)
            continue
        key_end = string_end(text, j) if text[j] == '"' else None
        if key_end is None:
            return call, None
        key = _loads(text[j:key_end])
        j = skip_ws(text, key_end)
        if j >= len(text) or text[j] != ":":
            return call, None
        start = skip_ws(text, j + 1)
        end = scans.value_end(start)
        if key == "name" and not seen_name:  # a repeated key: the first one counts, streamed or whole
            if end is None:
                return call, None
            seen_name = True
            name = _loads(text[start:end]) if text[start:end].startswith('"') else None
            call.name = name if isinstance(name, str) and name else None  # "": no call, as no name
        elif key in ARGUMENT_KEYS and not seen_arguments:
            call.keyed = True
            raw = text[start:end] if end is not None else text[start:]
            if raw.startswith('"'):  # JSON text inside a JSON string: whole or nothing
                call.string_arguments = True
                if end is None:
                    call.arguments = ""
                else:  # not a JSON string (a bad escape): its characters as written, still text
                    inner = scans.cached(start, _loads, raw)
                    call.arguments = inner if isinstance(inner, str) else raw[1:-1]
            else:
                call.arguments = raw
            seen_arguments = end is not None
        if end is None:
            return call, None
        j = skip_ws(text, end)
    return call, None


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _held_back(text: str, marker: str) -> int:
    """How many characters at the end of `text` could begin `marker` (to keep out of streamed content)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


def marks_calls(first: int, calls: list[PartialCall], final: bool) -> bool:
    """Whether the marker at `first` (-1: none) begins calls: it has calls behind it, or may still have
    while the output goes on. One without is text, as vLLM has it."""
    return first != -1 and (bool(calls) or not final)


def _content_before(text: str, at: int, has_calls: bool, final: bool, marker: str | tuple[str, ...]) -> str:
    """Content: the text before the first call (right-stripped once a call follows it); while nothing more
    is known, all but a possible start of a marker (any of them) and trailing whitespace, which a call
    could still follow."""
    if has_calls:
        return text[:at].rstrip()
    if final:
        return text
    markers = (marker,) if isinstance(marker, str) else marker
    safe = text[: len(text) - max(_held_back(text, m) for m in markers)]
    return safe.rstrip()


# ----------------------------------------------------------------------------------- parsers
class HermesParser(ToolParser):
    name = "hermes"
    needs_special_tokens = True
    """Some models' tokenizers make `<tool_call>` special: skipped, no call would be seen (as vLLM keeps them)."""
    START, END = "<tool_call>", "</tool_call>"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        """As Qwen's template shows the model its calls: the object on a line of its own."""
        return self.START, f'{self.START}\n{{"name": {json.dumps(name)}, "arguments": ', f"}}\n{self.END}"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        calls: list[PartialCall] = []
        at, first = scans.find(self.START, 0), -1
        while at != -1:
            start = skip_ws(text, at + len(self.START))
            resume = at + len(self.START)
            if arriving(text, start, self.START):
                if not final:  # what follows the marker has not arrived (or may be the next marker)
                    first = at if first == -1 else first
                    break
            elif text[start] == "{":
                call, end = call_object(scans, start)
                if call.name is not None or end is None:
                    calls.append(call)
                    first = at if first == -1 else first
                if end is None:
                    break
                resume = end  # a marker inside the call's own strings starts nothing
            at = scans.find(self.START, resume)
        # a marker with no call behind it (not a JSON object, or one without a name) is text, as vLLM has it
        calls = [c for c in calls if c.name is not None or not final]
        content = _content_before(text, first, marks_calls(first, calls, final), final, self.START)
        return ToolView(content, calls)


def after_leading_tag(text: str, tag: str, final: bool) -> int | ToolView:
    """Where the body starts past an optional leading `tag` (and whitespace), or the whole view when no
    body has arrived: nothing while the text may still become the tag, the text once it is final."""
    i = skip_ws(text, 0)
    if text.startswith(tag, i):
        i = skip_ws(text, i + len(tag))
    elif i < len(text) and arriving(text, i, tag) and not final:
        return ToolView()  # may still become the tag
    if i >= len(text):
        return ToolView(text if final else "")
    return i


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    TAG = "<|python_tag|>"

    def view(self, text: str, final: bool) -> ToolView:
        i = after_leading_tag(text, self.TAG, final)
        if isinstance(i, ToolView):
            return i
        if text[i] != "{":
            return ToolView(text)
        calls = keyed_calls(_separated_calls(self.scans.read(text), i, ";"))
        if final and not calls:  # JSON, but no call in it: the model's answer
            return ToolView(text)
        return ToolView("", calls)


class MistralParser(ToolParser):
    name = "mistral"
    needs_special_tokens = True
    MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"

    @staticmethod
    def call_id(name: str, index: int) -> str:
        """Nine letters and digits: Mistral's chat templates refuse any other id when the call comes back."""
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        first = scans.find(self.MARKER, 0)
        calls: list[PartialCall] = []
        if first != -1:
            rest = skip_ws(text, first + len(self.MARKER))
            if rest < len(text) and text[rest] == "[":
                calls = _separated_calls(scans, skip_ws(text, rest + 1), ",")
            elif rest < len(text) and text[rest] == "{":  # one object, not in a list
                calls = _separated_calls(scans, rest, ",")
            else:
                calls = self._args_calls(scans, first)
            if final:  # a marker with no call behind it is text, as vLLM has it
                calls = [c for c in calls if c.name]
        return ToolView(_content_before(text, first, marks_calls(first, calls, final), final, self.MARKER), calls)

    def _args_calls(self, scans: TextScans, at: int) -> list[PartialCall]:
        """`[TOOL_CALLS]name[ARGS]{...}` calls (`[CALL_ID]id` may follow the name; `[ARGS]` may be left out
        before the arguments' object), one after another."""
        text = scans.text
        calls = []
        while at != -1:
            start = at + len(self.MARKER)
            head = _MISTRAL_HEAD.match(text, start)
            if head is None:
                break
            call = PartialCall(name=head["name"], id=head["id"] if _MISTRAL_ID.fullmatch(head["id"] or "") else None)
            begin = skip_ws(text, head.end())
            end = scans.value_end(begin)
            call.arguments = text[begin:end] if end is not None else text[begin:]
            call.complete = end is not None
            calls.append(call)
            if end is None:
                break
            at = scans.find(self.MARKER, end)
        return calls


_MISTRAL_HEAD = re.compile(r"\s*(?P<name>[^\s\[{]+?)\s*(?:\[CALL_ID\](?P<id>.*?))?(?:\[ARGS\]|(?=\{))", re.DOTALL)
"""A Mistral call's head: its name, an id, and `[ARGS]` (or the arguments' `{` straight after the name)."""
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")


class RequiredParser(ToolParser):
    """tool_choice "required": the output is the JSON list the server's grammar allowed."""

    name = "required"
    forced = True

    def view(self, text: str, final: bool) -> ToolView:
        i = skip_ws(text, 0)
        if i >= len(text) or text[i] != "[":
            return ToolView()
        return ToolView("", _separated_calls(self.scans.read(text), skip_ws(text, i + 1), ","))


class NamedParser(ToolParser):
    """A named tool_choice: the whole output is the arguments of that function."""

    name = "named"
    forced = True

    def __init__(self, function: str) -> None:
        super().__init__()
        self.function = function

    def view(self, text: str, final: bool) -> ToolView:
        """The call begins with its arguments' first character: none before (a stream sends its id and name
        with that character, after any reasoning), and none at all when the output ended first (cut while
        thinking, or at once), as vLLM has it. Trailing whitespace is held back while streaming, as the final
        view drops it: the streamed arguments then add up to the whole message's."""
        arguments = text.strip()
        return ToolView("", [PartialCall(self.function, arguments, final)] if arguments else [])


class NamedCustomParser(NamedParser):
    """A named custom tool: the whole output is its input, as written (whitespace included); as for a
    function, no call before its first character."""

    name = "named_custom"
    raw_input = True

    def view(self, text: str, final: bool) -> ToolView:
        return ToolView("", [PartialCall(self.function, text, final)] if text else [])


def keyed_calls(calls: list[PartialCall]) -> list[PartialCall]:
    """The calls up to the first object with no name or no arguments key (so far): where no marker says that
    calls follow, only such objects are calls, and JSON like {"name": "Ada", "born": 1815} is an answer."""
    for k, call in enumerate(calls):
        if call.name is None or not call.keyed:
            return calls[:k]
    return calls


def _separated_calls(scans: TextScans, i: int, separator: str) -> list[PartialCall]:
    """Call objects one after another from text[i], with `separator` (and whitespace) between them."""
    text = scans.text
    calls = []
    while i < len(text) and text[i] == "{":
        call, end = call_object(scans, i)
        calls.append(call)
        if end is None:
            break
        i = skip_ws(text, end)
        if i < len(text) and text[i] == separator:
            i = skip_ws(text, i + 1)
    return calls
