"""Tool calls read from a model's text: vLLM's `--tool-call-parser` formats, and the two the server constrains.

A parser turns the text generated so far into a `ToolView`: the content a client may see already and
the calls begun so far, each with its name (once complete) and its arguments' JSON text as far as it
has arrived. Views only grow as text arrives (content is appended to, a call's arguments extended, a
name set once), so streaming is a diff of successive views (chat_output.py) and the whole response is
the last view: both give the same calls. Parsers read the text, never token ids. A stream's views read its
text through `TextScans`, whose searches go on where the last view's stopped: each costs about its delta.

- `hermes` (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number.
- `llama3_json` (Llama 3.1+): the whole output is `{"name": ..., "parameters": {...}}`, calls separated by
  `;`, optionally after `<|python_tag|>`; anything else is content, an object without both keys included.
- `mistral`: `[TOOL_CALLS]` then a JSON list of {"name", "arguments"} objects (or one object), or (newer
  tokenizers) `[TOOL_CALLS]name[ARGS]{...}` per call (`[CALL_ID]id` may follow the name, `[ARGS]` may be
  left out); needs special tokens in the text (skip_special_tokens off).
- `deepseek_v3` (DeepSeek-V3, R1-0528): `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
  <｜tool▁sep｜>NAME`, a newline, the arguments in a ```json fence and `<｜tool▁call▁end｜>`; special tokens.
- `deepseek_v31` (DeepSeek-V3.1): the same markers, `NAME<｜tool▁sep｜>` and the bare JSON arguments.
- `kimi_k2` (Kimi-K2): a section of `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>`
  calls with JSON arguments; the model's id is the call's id.
- `glm45`, `qwen3_coder`, `seed_oss` (arguments as key/value tags, tool_parsers_kv.py), `pythonic` (a Python
  list of calls, tool_parsers_pythonic.py), `xlam` (a JSON list of calls, fenced or tagged, tool_parsers_xlam.py)
  and the JSON formats behind other markers (granite, jamba, minimax, internlm, ...: tool_parsers_tagged.py)
  live beside this module; tool_parser_registry.py names them all.
- `required` (tool_choice "required"): the server constrained the output to a JSON list of {"name",
  "parameters"} objects. `named` (a named tool_choice): the output is the arguments themselves.

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
            call.name = name if isinstance(name, str) else None
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
        content = _content_before(text, first, first != -1 and (bool(calls) or not final), final, self.START)
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
        has_calls = first != -1 and (bool(calls) or not final)
        return ToolView(_content_before(text, first, has_calls, final, self.MARKER), calls)

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


class DeepSeekV3Parser(ToolParser):
    """DeepSeek-V3's calls: special-token markers around a name and a ```json fenced arguments object. Some
    outputs leave out the outer `<｜tool▁calls▁begin｜>`: a lone `<｜tool▁call▁begin｜>` starts calls too."""

    name = "deepseek_v3"
    needs_special_tokens = True
    CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    CALL_BEGIN, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
    ALSO: tuple[str, ...] = ()
    """Other spellings of a marker that starts calls, kept out of content while they may be arriving."""

    def call_frame(self, name: str) -> tuple[str, str, str]:
        """One call a block (the template's form of each call, fenced JSON arguments)."""
        begin = f"{self.CALLS_BEGIN}{self.CALL_BEGIN}function{self.SEP}{name}\n```json\n"
        return self.CALLS_BEGIN, begin, f"\n```{self.CALL_END}{self.CALLS_END}"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        starts = (scans.find(self.CALLS_BEGIN, 0), scans.find(self.CALL_BEGIN, 0))
        first = min((i for i in starts if i != -1), default=-1)
        calls: list[PartialCall] = []
        if first != -1:
            stop = scans.find(self.CALLS_END, first)  # anything after the calls block is not a call
            body = scans if stop == -1 else TextScans(text[:stop])  # once closed, read afresh: little follows it
            at = body.find(self.CALL_BEGIN, first)
            while at != -1:
                call, end = self._call(body, at + len(self.CALL_BEGIN))
                if call is None:
                    break
                calls.append(call)
                at = body.find(self.CALL_BEGIN, end) if end is not None else -1
        has_calls = first != -1 and (bool(calls) or not final)  # markers with no call behind them are text
        content = _content_before(text, first, has_calls, final, (self.CALLS_BEGIN, self.CALL_BEGIN, *self.ALSO))
        return ToolView(content, calls)

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        """The call whose `type<｜tool▁sep｜>` starts at text[i] (None until its name has all arrived) and the
        index past it (None while it goes on)."""
        text = scans.text
        sep = scans.find(self.SEP, i)
        close = scans.find(self.CALL_END, i)
        newline = text.find("\n", sep, close if close != -1 else len(text)) if sep != -1 else -1
        name = text[sep + len(self.SEP) : newline].strip()
        if newline == -1 or not name:
            return None, None  # the name goes on, or the call is not in this format
        call = PartialCall(name=name)
        j = skip_ws(text, newline)
        if text.startswith("```", j):  # the fence and its language tag
            j = scans.find("\n", j) + 1
            if j == 0:
                return call, None
        elif arriving(text, j, "```"):
            return call, None
        return self._arguments(call, scans, skip_ws(text, j))

    def _arguments(self, call: PartialCall, scans: TextScans, j: int) -> tuple[PartialCall, int | None]:
        """`call` with its arguments from text[j]: a JSON object whole, else the raw text up to the end
        marker (never a piece of either end marker); and the index past the call (None while it goes on)."""
        text = scans.text
        close = scans.find(self.CALL_END, j)
        end = scans.value_end(j) if text.startswith("{", j) else None
        if end is not None and (close == -1 or end <= close):
            call.arguments, call.complete = text[j:end], True
            return call, end
        held = max(_held_back(text, self.CALL_END), _held_back(text, self.CALLS_END))
        call.arguments = text[j:close] if close != -1 else text[j : len(text) - held]
        return call, close + len(self.CALL_END) if close != -1 else None


class DeepSeekV31Parser(DeepSeekV3Parser):
    """DeepSeek-V3.1's calls: the same markers, but the name before `<｜tool▁sep｜>` and the arguments' JSON
    straight after it, no type and no fence: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`."""

    name = "deepseek_v31"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        return (
            self.CALLS_BEGIN,
            f"{self.CALLS_BEGIN}{self.CALL_BEGIN}{name}{self.SEP}",
            f"{self.CALL_END}{self.CALLS_END}",
        )

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        text = scans.text
        sep = scans.find(self.SEP, i)
        name = text[i:sep].strip() if sep != -1 else ""
        if not name:
            return None, None  # the name goes on, or the call is not in this format
        return self._arguments(PartialCall(name=name), scans, skip_ws(text, sep + len(self.SEP)))


class KimiK2Parser(DeepSeekV3Parser):
    """Kimi-K2's calls: a section of special-token markers, each call's id (`functions.NAME:INDEX`), then its
    JSON arguments: `<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`. The id is the call's id
    in the response (Kimi's template writes it back so), the name its part between `functions.` and the
    last colon.
    Some outputs spell the section markers singular (`tool_call_section`): they count the same."""

    name = "kimi_k2"
    CALLS_BEGIN, CALLS_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    CALL_BEGIN, SEP, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
    ALSO = ("<|tool_call_section_begin|>",)

    @staticmethod
    def call_id(name: str, index: int) -> str:
        return f"functions.{name}:{index}"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        begin = f"{self.CALLS_BEGIN}{self.CALL_BEGIN}{self.call_id(name, 0)}{self.SEP}"
        return self.CALLS_BEGIN, begin, f"{self.CALL_END}{self.CALLS_END}"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        singular = scans.find(self.ALSO[0], 0)
        if singular != -1 and not -1 < scans.find(self.CALLS_BEGIN, 0) < singular:  # spelled so throughout
            spelled = _KimiK2Singular(self.tools)
            spelled.scans = scans  # of the same text: they stand
            return spelled.view(text, final)
        return super().view(text, final)

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        text = scans.text
        sep = scans.find(self.SEP, i)
        call_id = text[i:sep].strip() if sep != -1 else ""
        numbered = _KIMI_ID.fullmatch(call_id)  # the name may hold dots and colons itself
        name = numbered.group(1) if numbered else call_id
        if not name:
            return None, None  # the id goes on, or the call is not in this format
        call = PartialCall(name=name, id=call_id if numbered else None)
        return self._arguments(call, scans, skip_ws(text, sep + len(self.SEP)))


_KIMI_ID = re.compile(r"(?:functions\.)?(.+):\d+", re.DOTALL)
"""A Kimi-K2 call id: `functions.NAME:INDEX` (the prefix sometimes left out)."""


class _KimiK2Singular(KimiK2Parser):
    """Kimi-K2's calls in a section spelled `<|tool_call_section_begin|>` ... `<|tool_call_section_end|>`."""

    CALLS_BEGIN, CALLS_END = "<|tool_call_section_begin|>", "<|tool_call_section_end|>"
    view = DeepSeekV3Parser.view


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
        """Trailing whitespace is held back while streaming, as the final view drops it: the streamed
        arguments then add up to the whole message's."""
        return ToolView("", [PartialCall(self.function, text.strip(), final)])


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
