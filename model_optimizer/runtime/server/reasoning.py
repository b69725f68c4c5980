"""Reasoning split from the answer: vLLM's `--reasoning-parser` for models that think in `<think>...</think>`.

A parser maps the text generated so far to (reasoning, content), each only growing as text arrives, so a
stream sends their new characters as `reasoning_content` and `content` deltas and the whole response
holds the last split (chat_output.py). A possible start of a tag at the end is held back until it is
known not to be one.

- `qwen3`: reasoning only when the output opens with `<think>` (Qwen3 writes it in thinking mode; with
  thinking off its template closes an empty block in the prompt), up to `</think>` or a Qwen3.5 tool call
  begun while thinking; otherwise all content.
- `glm45` (GLM-4.5/4.6): the same rule, as its template does the same.
- `deepseek_v3` (DeepSeek-V3.1, thinking or not by the `thinking` template keyword): the same rule too,
  since its template opens the block in the prompt when thinking and closes it when not.
- `mistral` (Magistral): the same rule with `[THINK]` and `[/THINK]`, special tokens, kept in the text.
- `deepseek_r1`: everything before `</think>` is reasoning, whether or not the output repeats the
  `<think>` the template put in the prompt; an output without `</think>` is reasoning alone.
- `minimax_m2`, `step3`, `kimi_k2` and `ernie45` (whose answer may sit in `<response>` tags, left out of the
  content): deepseek_r1's rule, as their templates open the block (Kimi-K2 may write `<think>` again).
- `seed_oss`: qwen3's rule with `<seed:think>` and `</seed:think>`.
- `openai_gptoss` (gpt-oss): OpenAI's harmony messages (harmony.py), the analysis channel the reasoning.
- `minimax_m2_append_think`: no split; the content is `<think>` and the whole output, for clients that
  send MiniMax-M2's thinking back in the conversation.

Each parser also reads the end of the rendered prompt (`prompt_state`): a prompt that opened a block
(Qwen3-Thinking-2507's and DeepSeek-R1's templates end with `<think>`) makes the output reasoning up to
`</think>` whatever the parser; a prompt that closed one (thinking turned off through
`chat_template_kwargs`) makes it all content. With a parser, an output constraint (response_format,
structured_outputs, a required or named tool call) applies after the reasoning, as in vLLM:
`constraint_tags` says how the block looks, and the grammar lets the model think freely first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model_optimizer.runtime.server import harmony
from model_optimizer.runtime.server.tool_parsers import _held_back
from model_optimizer.runtime.structured.grammar import REASONING_WHITESPACE

START, END = "<think>", "</think>"


OPEN, CLOSED = "open", "closed"


def prompt_state(prompt: str | None, start: str = START, end: str = END, after: str = "") -> str:
    """OPEN when the prompt ends inside a reasoning block, CLOSED when it ends with a closed one (the end tag
    then whitespace), "" otherwise. Only the prompt's tail counts: what follows `after`, the text of the
    conversation's last message that is not the assistant's (a question about the `<think>` tag is no
    block); where the template did not write that text as given, only a prompt ending in a tag counts."""
    if not prompt:
        return ""
    tail = prompt.rstrip()
    tags = _spans(prompt, (start, end))
    found = next(
        (at + len(t) for t in (after, after.strip()) if t and (at := _last_outside(prompt, t, tags)) != -1), None
    )
    if found is None:
        return OPEN if tail.endswith(start) else CLOSED if tail.endswith(end) else ""
    tail = prompt[found:]
    if tail.rfind(start) > tail.rfind(end):
        return OPEN  # an assistant's prefill may go on after its tag (continue_final_message)
    return CLOSED if tail.rstrip().endswith(end) else ""


def _spans(text: str, tags: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of every occurrence of each tag in `text`."""
    spans = []
    for tag in tags:
        at = text.find(tag)
        while at != -1:
            spans.append((at, at + len(tag)))
            at = text.find(tag, at + 1)
    return spans


def _last_outside(prompt: str, text: str, tags: list[tuple[int, int]]) -> int:
    """Where `text` last occurs in `prompt` without cutting into a tag (`tags`: their spans), or -1: a short
    message ("hi") also occurs inside the `<think>` the template writes after it, which is no place the
    message ended. A text that holds a whole tag (a question about `<think>`) may stand over it."""
    at = prompt.rfind(text)
    while at != -1:
        end = at + len(text)
        if not any(a < end and at < b and not (at <= a and b <= end) for a, b in tags):
            return at
        at = prompt.rfind(text, 0, end - 1)
    return -1


class ReasoningParser:
    name = ""
    START, END = START, END
    """The block's tags."""
    implicit_start = False
    """Reasoning until END even without START (the template opened the block in the prompt)."""
    needs_special_tokens = False
    """Its tags are special tokens: the text must keep them (skip_special_tokens off)."""
    ALSO_ENDS: tuple[str, ...] = ()
    """Markers that end the reasoning without END and begin the content (Kimi-K2's and Qwen3.5's tool calls)."""

    def __init__(self, prompt: str = "") -> None:
        self.prompt = prompt
        """prompt_state() of the rendered prompt."""
        self.answer_lead = 0
        """Leading whitespace characters the content drops after the block: under a constraint, the few
        the grammar lets the model write between its end tag and the constrained answer (constrained)."""

    @classmethod
    def for_prompt(cls, prompt: str | None, after: str = "") -> ReasoningParser:
        """The parser for an output that follows `prompt` (the rendered chat; `after` as prompt_state's),
        with its own tags."""
        return cls(prompt_state(prompt, cls.START, cls.END, after))

    def constraint_tags(self) -> tuple[str, str]:
        """(start, end) of the reasoning block an output constraint follows (StructuredOutputs'
        reasoning_start and reasoning_end): ("", "") when the output has none, ("", END) when it opens
        inside one, (START, END) when it may open one."""
        if self.prompt == CLOSED:
            return "", ""
        if self.prompt == OPEN or self.implicit_start:
            return "", self.END
        return self.START, self.END

    def constrained(self) -> tuple[str, str]:
        """constraint_tags for an output constraint, whose grammar ends the reasoning at END alone: from now
        on so does the split (Kimi-K2's tool section written while thinking stays reasoning, as the grammar
        reads it, instead of taking the constrained answer after it for content)."""
        self.ALSO_ENDS = ()
        self.answer_lead = REASONING_WHITESPACE  # "\n\n" before a choice's "yes" is not the answer
        return self.constraint_tags()

    def split(self, text: str, final: bool) -> tuple[str, str]:
        """(reasoning, content) of the text so far."""
        if self.prompt == CLOSED:
            return "", text
        head = text.lstrip()
        if head.startswith(self.START):
            return self._reasoning(head[len(self.START) :], final)
        if not final and self.START.startswith(head):
            return "", ""  # may still become START
        if self.implicit_start or self.prompt == OPEN:
            return self._reasoning(text, final)
        return "", text

    def count_tokens(self, text: str, token_ids: Sequence[int], encode: Callable[[str], Sequence[int]]) -> int:
        """How many of an output's tokens are reasoning: those between the block's tags (the tags not
        counted), as usage.completion_tokens_details.reasoning_tokens says. The tags are found as the
        tokenizer writes them (`encode`: text to token ids); where the output's tokens spell a tag
        otherwise (merged with its neighbours), the reasoning text is encoded again instead."""
        reasoning, _ = self.split(text, final=True)
        if not reasoning:
            return 0
        start_ids, end_ids = list(encode(self.START)), list(encode(self.END))
        ids = list(token_ids)
        end = _find(ids, end_ids)
        if end < 0 and (self.END in text or any(m in text for m in self.ALSO_ENDS)):
            return len(encode(reasoning))
        stop = end if end >= 0 else len(ids)
        opened = text.lstrip().startswith(self.START)  # else a START inside the reasoning is reasoning too
        start = _find(ids[:stop], start_ids) if opened else -1
        return stop - (start + len(start_ids) if start >= 0 else 0)

    def _reasoning(self, body: str, final: bool) -> tuple[str, str]:
        end = body.find(self.END)
        also = min((at for m in self.ALSO_ENDS if (at := body.find(m)) != -1), default=-1)
        if also != -1 and (end == -1 or also < end):
            return body[:also], body[also:]  # the marker is the content's start
        if end != -1:
            content = body[end + len(self.END) :]
            lead = len(content) - len(content.lstrip(" \t\r\n"))  # the grammar's whitespace (grammar.py)
            return body[:end], content[min(lead, self.answer_lead) :]
        held = max(_held_back(body, m) for m in (self.END, *self.ALSO_ENDS))
        return (body if final else body[: len(body) - held]), ""


def _find(ids: list[int], part: list[int]) -> int:
    """Where `part` first occurs in `ids`, or -1."""
    if not part:
        return -1
    first, n = part[0], len(part)
    for at in range(len(ids) - n + 1):
        if ids[at] == first and ids[at : at + n] == part:
            return at
    return -1


class Qwen3ReasoningParser(ReasoningParser):
    """Qwen3 and Qwen3.5. Qwen3.5 may begin a call (Qwen3-Coder's format, `<tool_call>` then `<function=NAME>`)
    inside its thinking without closing the block: the call ends the reasoning and begins the content, as
    vLLM reads it; a `<tool_call>` only mentioned while thinking stays reasoning."""

    name = "qwen3"
    ALSO_ENDS = ("<tool_call>\n<function=",)


class Glm45ReasoningParser(ReasoningParser):
    name = "glm45"


class DeepSeekV3ReasoningParser(ReasoningParser):
    name = "deepseek_v3"


class DeepSeekR1ReasoningParser(ReasoningParser):
    name = "deepseek_r1"
    implicit_start = True


class MistralReasoningParser(ReasoningParser):
    name = "mistral"
    START, END = "[THINK]", "[/THINK]"
    needs_special_tokens = True


class MiniMaxM2ReasoningParser(ReasoningParser):
    """MiniMax-M2: its template opens the block, the model writes only `</think>`."""

    name = "minimax_m2"
    implicit_start = True


class Step3ReasoningParser(ReasoningParser):
    """Step-3: its template opens the block, the model closes it with `</think>`."""

    name = "step3"
    implicit_start = True


class KimiK2ReasoningParser(ReasoningParser):
    """Kimi-K2 (Thinking): reasoning from the start, `<think>` written or not, up to `</think>`, or up to its
    tool-call section, which it may begin without closing the block (as vLLM's parser reads it); a prompt
    that closed the block (thinking off) leaves it all content."""

    name = "kimi_k2"
    implicit_start = True
    ALSO_ENDS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")


class SeedOssReasoningParser(ReasoningParser):
    """Seed-OSS: `<seed:think>` ... `</seed:think>`, the model opening it (budget reflections stay inside)."""

    name = "seed_oss"
    START, END = "<seed:think>", "</seed:think>"


class Ernie45ReasoningParser(ReasoningParser):
    """ERNIE-4.5 (thinking): the template opens the block; after `</think>` the answer may sit in
    `<response>` ... `</response>`: the content is the answer without those tags, and what follows them
    (a tool call)."""

    name = "ernie45"
    implicit_start = True
    ANSWER, ANSWER_END = "<response>", "</response>"

    def split(self, text: str, final: bool) -> tuple[str, str]:
        reasoning, content = super().split(text, final)
        return reasoning, self._answer(content, final)

    def _answer(self, content: str, final: bool) -> str:
        """The content inside the answer tags, where it opens with them (as far as it has arrived)."""
        head = content.lstrip()
        if not head.startswith(self.ANSWER):
            return "" if not final and self.ANSWER.startswith(head) else content
        body = head[len(self.ANSWER) :].lstrip("\n")
        end = body.find(self.ANSWER_END)
        if end != -1:  # what follows the answer (a tool call) stays content
            return body[:end] + body[end + len(self.ANSWER_END) :]
        return body if final else body[: len(body) - _held_back(body, self.ANSWER_END)]


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    """MiniMax-M2 for clients that send the thinking back: nothing is split, the content is the output
    with the `<think>` the template opened written in front, `</think>` and all."""

    name = "minimax_m2_append_think"

    def split(self, text: str, final: bool) -> tuple[str, str]:
        return "", (self.START + text if text or final else "")

    def constraint_tags(self) -> tuple[str, str]:
        return "", self.END

    def count_tokens(self, text: str, token_ids: Sequence[int], encode: Callable[[str], Sequence[int]]) -> int:
        return 0


class GptOssReasoningParser(ReasoningParser):
    """gpt-oss (OpenAI's harmony format, harmony.py): the analysis messages' bodies are the reasoning; the content
    is the final and commentary messages' bodies, and each call to a tool as written, for `--tool-call-parser
    openai`. A prompt that ends inside a message's header and `<|message|>` (a prefilled answer) makes the
    output that message's body."""

    name = "openai_gptoss"
    needs_special_tokens = True
    START, END = harmony.CHANNEL + harmony.ANALYSIS + harmony.MESSAGE, harmony.ANSWER_HEADER
    """How a reasoning message opens; where the answer starts (an output constraint applies after it, a thinking
    budget forces it). Its markers are special tokens, which free text never holds: under a constraint the
    reasoning is one analysis message, then this header."""

    def __init__(self, prompt: str = "", lead: str = "") -> None:
        super().__init__(prompt)
        self.lead = lead
        """The header the prompt ended with, when it ended inside a message: the output goes on in it."""

    @classmethod
    def for_prompt(cls, prompt: str | None, after: str = "") -> ReasoningParser:
        tail = (prompt or "").rstrip()
        if not tail.endswith(harmony.MESSAGE):
            return cls()
        opener = max(tail.rfind(harmony.START), tail.rfind(harmony.CHANNEL))
        return cls(lead=tail[opener:] if opener != -1 else "")

    def constraint_tags(self) -> tuple[str, str]:
        """The constraint applies to the final message, after the answer header; the analysis message before it
        opens with its header (START: free text holds no special token), or was opened by the prompt; from the
        first token where the prompt opened a message other than the analysis."""
        if not self.lead:
            return self.START, self.END
        if harmony.read_messages(self.lead, final=False)[0].channel != harmony.ANALYSIS:
            return "", ""
        return "", self.END

    def split(self, text: str, final: bool) -> tuple[str, str]:
        reasoning, content, answered = [], "", False
        for message in harmony.read_messages(self.lead + text, final):
            if message.recipient is not None:
                content += message.raw  # a call, for the tool parser
            elif message.channel == harmony.ANALYSIS:
                reasoning.append(message.body)
            elif message.channel == "final" and not answered:  # the grammar's whitespace before a constrained answer
                answered, body = True, message.body
                lead = len(body) - len(body.lstrip(" \t\r\n"))
                content += body[min(lead, self.answer_lead) :]
            else:
                content += message.body
        return "\n".join(reasoning), content

    def count_tokens(self, text: str, token_ids: Sequence[int], encode: Callable[[str], Sequence[int]]) -> int:
        """The reasoning's tokens, encoded again (its headers are not counted)."""
        reasoning, _ = self.split(text, final=True)
        return len(encode(reasoning)) if reasoning else 0


REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    p.name: p
    for p in (
        Qwen3ReasoningParser,
        DeepSeekR1ReasoningParser,
        DeepSeekV3ReasoningParser,
        Glm45ReasoningParser,
        MistralReasoningParser,
        MiniMaxM2ReasoningParser,
        MiniMaxM2AppendThinkReasoningParser,
        Step3ReasoningParser,
        KimiK2ReasoningParser,
        SeedOssReasoningParser,
        Ernie45ReasoningParser,
        GptOssReasoningParser,
    )
}
"""--reasoning-parser choices."""
