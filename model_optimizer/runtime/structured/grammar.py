"""StructuredOutputs -> an llguidance grammar, checked; and the tokenizer llguidance masks tokens of.

llguidance (chosen over xgrammar and outlines-core: it refuses the schema keywords it cannot enforce
instead of ignoring them, never produced invalid JSON in our comparison, and compiles a schema in a
few milliseconds with no per-vocabulary index) is imported here, where grammars are made, and in
the engine core; the frontend uses `check` to refuse a bad grammar with a 400 before it sends the
request.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from model_optimizer.runtime.structured.json_schema import prepare
from model_optimizer.runtime.structured.params import StructuredOutputs, structures_of
from model_optimizer.runtime.structured.tag_format import LarkBuilder, regex_literal
from model_optimizer.runtime.structured.token_regex import (
    Segment,
    angles_literal,
    ascii_classes,
    lark_ascii_classes,
    lark_items,
    lark_of,
)

WHITESPACE_RUN = 16
"""Most whitespace characters between two JSON tokens with whitespace_flexible: enough to pretty-print
a nested document, and a bound, so a model that favours whitespace cannot loop on it."""


JSON_CHARS = r'[^"\\\x00-\x1F\x7F]'
"""A JSON string's characters that need no escape (what llguidance's own slices are built on)."""
SLICES = (
    r"[\x20\x0A\x0D\x09]+",
    JSON_CHARS + "{1,10}",
    JSON_CHARS + "{1,20}",
    JSON_CHARS + "{1,30}",
    JSON_CHARS + "+",
)
"""llguidance's slicer sets: token sets whose mask is taken whole, without walking their part of the token
trie, wherever the lexer allows every token in them. A string under `maxLength` with r characters
left allows the slices of up to r characters, and the trie of every longer token is walked (to
depth r + 1, where it fails): llguidance's default slices (10, 30, unbounded) walk the 11-30
character tokens of a 151k vocabulary for every r from 10 to 29. The slice of up to 20 halves that
band. Slices change only how a mask is computed, never its bits."""


class GrammarError(ValueError):
    """The grammar is invalid, unsatisfiable, too complex, or uses something llguidance does not enforce."""


def engine_error(matcher: Any) -> str:
    """A failed llguidance matcher's reason, without the parser state it dumps after it (a `<state>` block
    of internal counters, hundreds of characters that tell a client nothing)."""
    return matcher.get_error().split("\n<state>", 1)[0].strip()


OVER_LIMITS = "the constraint went past the grammar engine's limits"
"""How the error of a request whose constraint outgrew llguidance's limits while it generated begins (a
row of more than 2,000 items: an object of hundreds of optional properties after a first token that
fitted): the request's doing, a 400 (server/request_group.py), which a retry would meet again."""
_LIMIT_WORDS = re.compile(r"max is \d|\(limit \d|limit for this grammar|fuel|too many states", re.IGNORECASE)
"""llguidance's wording of its limits (a parser row's items, the lexer's fuel and states, a grammar's size)."""
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
"""Quoted text in an error (the token it refused: a token " limit" is no limit)."""


def output_error(matcher: Any) -> str:
    """Why a matcher could not take a token its mask allowed: OVER_LIMITS, or the grammar engine's error."""
    reason = engine_error(matcher)
    over = _LIMIT_WORDS.search(_QUOTED.sub('""', reason))
    return f"{OVER_LIMITS}: {reason}" if over else f"the output left its grammar: {reason}"


REASONING_WHITESPACE = 4
"""Most whitespace characters between a reasoning block's end tag and the constrained answer (Qwen3 and
DeepSeek-R1 write two newlines there)."""


def grammar_of(so: StructuredOutputs, tokenizer: Any = None) -> str:
    """The llguidance grammar (a string it compiles) of a constraint; GrammarError when it cannot be made.
    `tokenizer` (an LLTokenizer) tells whether reasoning tags and structural-tag triggers are tokens of
    their own (see _tag)."""
    answer = _answer_grammar(so, tokenizer)
    return _after_reasoning(answer, so, tokenizer) if so.reasoning_end else answer


def _answer_grammar(so: StructuredOutputs, tokenizer: Any) -> str:
    import llguidance as llg

    try:
        if so.kind in ("json", "json_object"):
            schema = so.spec if so.kind == "json" else '{"type": "object"}'
            value = json.loads(schema)
            if value is False:
                raise GrammarError("the schema false admits no document")
            if value is True:  # any JSON value; llguidance's options need an object schema
                value = {}
            return llg.LLMatcher.grammar_from_json_schema(json.dumps(prepare(value)), defaults=_json_options(so))
        if so.kind == "regex":
            pattern = ascii_classes(angles_literal(so.spec))
            lark = lark_of(pattern, lambda t: _text_segments(t, tokenizer))
            return f"start: {lark}" if lark else llg.LLMatcher.grammar_from_regex(pattern)
        if so.kind == "choice":
            return _choice(json.loads(so.spec), tokenizer)
        if so.kind == "structural_tag":  # prepare() walks the whole tag document: its schemas' integers are
            # checked and their formats tightened as a json constraint's (tag fields use neither keyword)
            return _structural_tag(dataclasses.replace(so, spec=json.dumps(prepare(json.loads(so.spec)))), tokenizer)
        return lark_ascii_classes(llg.grammar_from("grammar", so.spec))  # Lark, or GBNF converted to Lark
    except (ValueError, TypeError, KeyError) as exc:  # KeyError: a format node without a key it needs
        raise GrammarError(f"invalid {so.kind}: {exc}") from None
    except RecursionError:
        raise GrammarError(f"invalid {so.kind}: it nests too deeply") from None


def _choice(choices: list[str], tokenizer: Any) -> str:
    """One regex, one lexeme (as Lark alternatives, 2,000+ choices overflow a parser row); the choices
    that spell a tag token (token_regex.py) beside it as Lark, with the token."""
    import llguidance as llg

    written = [(choice, lark_items(_text_segments(choice, tokenizer))) for choice in choices]
    tokened = [lark for _, lark in written if "<[" in lark]
    plain = "(" + "|".join(regex_literal(choice) for choice, lark in written if "<[" not in lark) + ")"
    if not tokened:
        return llg.LLMatcher.grammar_from_regex(plain)
    return "start: " + " | ".join(tokened if len(tokened) == len(choices) else [f"/{plain}/", *tokened])


def _after_reasoning(answer: str, so: StructuredOutputs, tokenizer: Any) -> str:
    """A grammar of free text up to `so.reasoning_end` (the first end tag closes the block; with
    `so.reasoning_start` the whole block is optional and opens with that tag), a little whitespace, then
    `answer` as a subgrammar: JSON schemas, regexes and Lark grammars alike (llguidance's grammar list)."""
    try:
        top = json.loads(answer)
    except ValueError:
        top = {"grammars": [{"lark_grammar": answer}]}
    grammars = top["grammars"]
    name = grammars[0].get("name") or "answer"
    grammars[0] = {**grammars[0], "name": name}
    end = _tag(so.reasoning_end, tokenizer)
    lark = [f"WS: /[ \\t\\r\\n]{{1,{REASONING_WHITESPACE}}}/"]
    if end.startswith("<["):  # a token first: text never holds it, so the text before it needs no laziness
        lark.append(f"reasoning: /(?s:.*)/ {end}")
    else:
        lark += [f"REASONING: /(?s:.*)/ {end}", "reasoning[lazy]: REASONING"]
    if so.reasoning_start:
        lark.append(f"start: ({_tag(so.reasoning_start, tokenizer)} reasoning WS?)? @{name}")
    else:
        lark.append(f"start: reasoning WS? @{name}")
    return json.dumps({**top, "grammars": [{"lark_grammar": "\n".join(lark)}, *grammars]})


def _tag(text: str, tokenizer: Any) -> str:
    """A reasoning tag in Lark. One that holds added tokens (Qwen3's and DeepSeek-R1's `<think>` / `</think>`,
    gpt-oss's `<|end|><|start|>assistant<|channel|>final<|message|>`: llguidance keeps added tokens out of the
    text, so only the token itself matches) is spelled token by token, the text between too, as the
    tokenizer writes it: a model free to spell gpt-oss's `analysis` in five pieces did so, and a thinking
    budget, which finds the tags by their tokens, never saw the block open. A tag of plain text is a
    string literal."""
    ids = tokenizer.tokenize_str(text) if tokenizer is not None else []
    if not any(tokenizer.is_special_token(token) for token in ids):
        return json.dumps(text)  # as written: no token in it
    return " ".join(f"<[{token}]>" for token in ids)


def _structural_tag(so: StructuredOutputs, tokenizer: Any) -> str:
    """The grammar of a structural tag, built by tag_format.LarkBuilder: vLLM's newer form as it is (a tree
    of formats), the older one as the format it is, free text in which each trigger starts its structure
    (the rest of its begin, JSON under its schema, its end). Triggers, begins and ends that the tokenizer
    has as added tokens (Qwen's `<tool_call>`) are those tokens, which text never holds. The schemas carry
    the JSON options of the other kinds (compact unless whitespace_flexible or whitespace_pattern)."""
    tag_format = json.loads(so.spec).get("format")
    if tag_format is None:
        tags = []
        for _, schema, begin, end in structures_of(so.spec):
            if schema is False:
                raise ValueError(f"the schema of {begin!r} is false: nothing can follow it")
            tags.append(
                {"type": "tag", "begin": begin, "content": {"type": "json_schema", "json_schema": schema}, "end": end}
            )
        tag_format = {"type": "triggered_tags", "triggers": json.loads(so.spec)["triggers"], "tags": tags}
    builder = LarkBuilder(lambda t: _segments(t, tokenizer), _json_options(so))
    return builder.grammar(tag_format)


def _segments(text: str, tokenizer: Any) -> list[Segment]:
    """`text` in pieces, each plain text or one added token (its text and id), as the tokenizer cuts it."""
    if not text:
        return []
    if tokenizer is None:
        return [(text, None)]
    parts: list[Segment] = []
    run: list[int] = []
    for token in tokenizer.tokenize_str(text):
        if tokenizer.is_special_token(token):
            if run:
                parts.append((tokenizer.decode_str(run), None))
                run = []
            parts.append((tokenizer.decode_str([token]), token))
        else:
            run.append(token)
    if run:
        parts.append((tokenizer.decode_str(run), None))
    return parts


def _text_segments(text: str, tokenizer: Any) -> list[Segment]:
    """_segments for the literal text of a regex or choice; ValueError where the text spells an end of
    sequence (`<|im_end|>`): the model would stop there, short of the rest of its grammar."""
    parts = _segments(text, tokenizer)
    stops = {token for _, token in parts if token is not None} & set(getattr(tokenizer, "eos_tokens", ()))
    if stops:
        raise ValueError(f"{text!r} spells {tokenizer.decode_str([min(stops)])!r}, which ends the output")
    return parts


COMPACT_JSON = {"whitespace_flexible": False}
"""llguidance's JSON options of a constraint that asks for no whitespace (the default): none between tokens."""


def _json_options(so: StructuredOutputs) -> dict[str, Any]:
    """llguidance's JSON options: the whitespace between JSON tokens, none unless asked."""
    if so.whitespace_pattern:
        return {"whitespace_pattern": so.whitespace_pattern}
    if not so.whitespace_flexible:
        return dict(COMPACT_JSON)
    return {"whitespace_pattern": f"[\\x20\\x0A\\x0D\\x09]{{0,{WHITESPACE_RUN}}}"}


def check(so: StructuredOutputs, tokenizer: Any = None) -> str:
    """The constraint's grammar once llguidance has validated it (against `tokenizer`, an LLTokenizer,
    when given); GrammarError with llguidance's reason otherwise. Warnings are no errors."""
    import llguidance as llg

    grammar = grammar_of(so, tokenizer)
    message = llg.LLMatcher.validate_grammar(grammar, tokenizer)
    if message and not message.startswith("WARNING"):
        raise GrammarError(f"invalid {so.kind}: {message.strip()}")
    return grammar


def check_offline(so: StructuredOutputs) -> None:
    """`check` without a tokenizer, before a Python API or `mopt generate` request is queued (a bad regex
    or grammar is a ValueError then, not an output with finish reason "error"); the reason on one line
    (llguidance's spans several: the regex with a caret under it)."""
    try:
        check(so)
    except ValueError as exc:
        raise GrammarError(" ".join(str(exc).split())) from None


def matcher(so: StructuredOutputs, tokenizer: Any) -> tuple[str, Any]:
    """(grammar, a matcher of it) as the engine core compiles a constraint; GrammarError with llguidance's
    reason when either cannot be made."""
    import llguidance as llg

    grammar = check(so, tokenizer)
    template = llg.LLMatcher(tokenizer, grammar, log_level=0)
    if template.is_error():
        raise GrammarError(f"invalid {so.kind}: {engine_error(template)}")
    return grammar, template


def tokenizer_spec(tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int] | list[int]) -> tuple:
    """(tokenizer.json text, vocabulary size, EOS ids) of a Hugging Face fast tokenizer: what the
    llguidance tokenizer is built from (here, or in sandbox.py's process); ValueError without one."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("structured outputs need the model's tokenizer.json (a Hugging Face fast tokenizer)")
    eos = sorted(eos_token_ids) or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
    return backend.to_str(), max(vocab_size, len(tokenizer)), tuple(eos)


def ll_tokenizer(
    tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int] | list[int], slices: tuple[str, ...] | None = SLICES
) -> Any:
    """The llguidance tokenizer of a Hugging Face fast tokenizer (ours, fast_tokenizer.py, or transformers'):
    its tokenizer.json read by llguidance's own Rust `tokenizers`, no transformers needed.

    `vocab_size` is the model's (its logits' width, often padded past the tokenizer); EOS is the
    model's own set, so a finished grammar allows exactly the tokens that end the request.
    `slices`: the slicer's sets (SLICES; None: llguidance's defaults, () none). ValueError for a
    tokenizer whose tokens do not concatenate into its text (a word-level one without a decoder): no
    grammar over bytes can constrain it."""
    return ll_tokenizer_from_json(*tokenizer_spec(tokenizer, vocab_size, eos_token_ids), slices)


def ll_tokenizer_from_json(
    tokenizer_json: str, vocab_size: int, eos_token_ids: tuple[int, ...], slices: tuple[str, ...] | None = SLICES
) -> Any:
    """ll_tokenizer from tokenizer_spec's parts."""
    import llguidance as llg

    try:
        return llg.LLTokenizer(
            tokenizer_json,
            n_vocab=vocab_size,
            eos_token=list(eos_token_ids) or None,
            slices=None if slices is None else list(slices),
        )
    except (ValueError, RuntimeError) as exc:
        raise ValueError(
            f"structured outputs are not available for this tokenizer: llguidance cannot read it ({exc}); "
            "byte-level BPE, SentencePiece and WordPiece tokenizers work"
        ) from None
