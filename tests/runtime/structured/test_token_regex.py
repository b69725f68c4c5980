"""Regexes and choices that spell a tag-like added token (Qwen's `<tool_call>`): written with the token."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.structured.grammar import GrammarError, check
from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.tag_format import regex_literal
from model_optimizer.runtime.structured.token_regex import joinable, lark_of, slashes_escaped
from tests.runtime.structured.test_grammar import _matching


def forced(text: str) -> list[tuple[str, int | None]]:
    """grammar._segments for a tokenizer whose only added token is `<T>` (id 9)."""
    parts: list[tuple[str, int | None]] = []
    for i, piece in enumerate(text.split("<T>")):
        parts += [("<T>", 9)] if i else []
        parts += [(piece, None)] if piece else []
    return parts


@pytest.mark.parametrize(
    ("pattern", "lark"),
    [
        ("ab <T>x", "/ab / <[9]> /x/"),
        ("^<T>[0-9]+$", "<[9]> /[0-9]+/"),
        (r"\d(<T>|no)*?z", r"/\d/ (<[9]> | /no/)* /z/"),
        (r"(?:a|<T>){1,2}", "(/a/ | <[9]>){1,2}"),
        (r"a.b/ \<T\>", r"/a.b\/ / <[9]>"),
        ("x|<T>", "/x/ | <[9]>"),
        ("[/]<T>", r"/[\/]/ <[9]>"),
        # the text around a token stays in the regex beside it: a greedy .* must be able to stop before it
        (r"<T>\n\{.*\}\n<T>", r"<[9]> /\n\{.*\}\n/ <[9]>"),
        (r"[a-z]+ing<T>", r"/[a-z]+ing/ <[9]>"),
        # a group of one branch, unquantified, is its items: its text joins the regex before it
        (r"[0-9]+\s*(\n<T>)", r"/[0-9]+\s*\n/ <[9]>"),
        ("<(T)>", "<[9]>"),
        # the regex before alternatives with tokens goes into each of them
        (r"[0-9]+\s*(\n<T>|x<T>y)", r"(/[0-9]+\s*\n/ <[9]> | /[0-9]+\s*x/ <[9]> /y/)"),
        (r"a/(<T>|b)", r"(/a\// <[9]> | /a\/b/)"),
    ],
)
def test_runs_that_spell_the_token_become_the_token(pattern, lark):
    assert lark_of(pattern, forced) == lark


@pytest.mark.parametrize("pattern", ["a(b|c)*", "[<T>]+", "<T>?", "<(T)>?", r"\x3cT>", "(unbalanced", "a\\"])
def test_a_pattern_with_no_such_run_is_left_to_llguidance(pattern):
    assert lark_of(pattern, forced) is None


def test_escaped_angle_brackets_are_the_characters():
    from model_optimizer.runtime.structured.token_regex import angles_literal

    assert angles_literal(r"a\<b\>[\<]") == "a<b>[<]"
    assert angles_literal(r"a\\<b") == r"a\\<b"  # an escaped backslash, then a plain <
    assert angles_literal(r"\d\.x") == r"\d\.x"


def test_inline_flags_are_refused_where_the_regex_would_be_split():
    with pytest.raises(ValueError, match="inline flags"):
        lark_of("(?i)ab<T>", forced)
    assert lark_of("(?i)ab", forced) is None
    assert slashes_escaped(r"a/[/]\/") == r"a\/[\/]\/"


@pytest.fixture(scope="module")
def taken(tmp_path_factory):
    return _matching(tmp_path_factory.mktemp("tags"), ["<think>", "<tool_call>", "</tool_call>"])


@pytest.mark.parametrize(
    ("so", "good", "bad"),
    [
        (StructuredOutputs.regex("ab <tool_call>[0-9]"), ["ab <tool_call>4"], ["ab 4", "ab <tool_call>"]),
        (
            StructuredOutputs.regex(r'<tool_call>\n\{"n": [0-9]\}\n</tool_call>$'),
            ['<tool_call>\n{"n": 3}\n</tool_call>'],
            ['{"n": 3}'],
        ),
        (StructuredOutputs.regex("(<think>|<tool_call>)[0-9]+"), ["<think>12", "<tool_call>3"], ["<think>", "3"]),
        (StructuredOutputs.regex("(<tool_call>x)+"), ["<tool_call>x<tool_call>x"], ["<tool_call>"]),
        (  # the README's example: the greedy .* must stop before the closing text and token
            StructuredOutputs.regex(r"<tool_call>\n\{.*\}\n</tool_call>"),
            ['<tool_call>\n{"a": 1}\n</tool_call>', "<tool_call>\n{}}\n</tool_call>"],
            ["<tool_call>\n{}\n", "<tool_call>\n{}"],
        ),
        (StructuredOutputs.regex("[a-z]+ing</tool_call>"), ["sing</tool_call>"], ["sin</tool_call>"]),
        # escaped angle brackets are text (Python's, JavaScript's reading), with or without a token there
        (StructuredOutputs.regex(r"\<tool_call\>[0-9]"), ["<tool_call>5"], ["5"]),
        (StructuredOutputs.regex(r"a\<b\>"), ["a<b>"], ["ab"]),
        (
            StructuredOutputs.regex(r"[0-9]+\s*(\n<tool_call>|\r<think>)"),
            ["12 \n<tool_call>", "1\r<think>"],
            ["12 <tool_call>", "12\n<think>"],
        ),
        (  # a greedy \s* before a group that starts with the newline: one lexeme, so the \s* can stop
            StructuredOutputs.regex(r"[0-9]+\s*(\n<tool_call>)"),
            ["12 \n<tool_call>", "12\n<tool_call>"],
            ["12 <tool_call>", "12 \n"],
        ),
        (StructuredOutputs.choice(["<tool_call>yes", "no", "a/b"]), ["<tool_call>yes", "no", "a/b"], ["yes"]),
        (StructuredOutputs.choice(["<think>", "<tool_call>"]), ["<think>", "<tool_call>"], ["think"]),
        (
            StructuredOutputs.tag_format({"type": "regex", "pattern": "<tool_call>[0-9]"}),
            ["<tool_call>5"],
            ["5"],
        ),
    ],
)
def test_the_token_is_how_the_output_writes_that_text(taken, so, good, bad):
    """Before, llguidance forced the text, tokenized it into the token and refused that token."""
    assert all(taken(so, text) for text in good)
    assert not any(taken(so, text) for text in bad)


@pytest.fixture(scope="module")
def ll(tmp_path_factory):
    """The built-in model's llguidance tokenizer with `<tool_call>` added (not special), EOS id 2."""
    from transformers import PreTrainedTokenizerFast

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    folder = tmp_path_factory.mktemp("tool_call")
    hf = PreTrainedTokenizerFast.from_pretrained(str(reference_model_path()))
    hf.add_tokens(["<tool_call>"])
    hf.save_pretrained(str(folder))
    tokenizer = load_tokenizer(folder)
    return ll_tokenizer(tokenizer, len(tokenizer), frozenset({2}))


def test_a_regex_with_flags_that_spells_the_token_is_a_grammar_error(ll):
    with pytest.raises(GrammarError, match="inline flags"):
        check(StructuredOutputs.regex("(?i)ab <tool_call>"), ll)


def test_text_that_spells_the_end_of_sequence_is_a_grammar_error(ll):
    """The model would stop at that token, short of the rest: a 400, not an output cut short."""
    end = ll.decode_str([2])
    assert ll.tokenize_str(end) == [2]
    for so in (StructuredOutputs.regex(f"a{regex_literal(end)}b"), StructuredOutputs.choice(["x", f"{end}!"])):
        with pytest.raises(GrammarError, match="ends the output"):
            check(so, ll)


@pytest.mark.parametrize(
    ("pattern", "joined"),
    [
        (".*", ".*"),
        ("^[0-9]+$", "[0-9]+"),
        (r"a\$", r"a\$"),
        ("[$^]x", "[$^]x"),
        ("^a$|^b$", None),  # anchors inside: joined with text after it, it would mean something else
        ("(?x)a # c", None),  # a comment would swallow what follows
        ("a)|(b", None),  # does not parse on its own: it would escape the group it is put in
    ],
)
def test_a_regex_is_joined_with_what_follows_only_as_it_is(pattern, joined):
    assert joinable(pattern) == joined
