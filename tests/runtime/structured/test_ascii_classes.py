"""`\\d` and `\\w` are ASCII in every regex constraint, as llguidance reads a JSON schema's `pattern`: regexes,
classes, Lark terminals and structural tags, checked on the built-in model's tokenizer."""

from __future__ import annotations

import json

import pytest

from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.structured.grammar import ll_tokenizer, matcher
from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.token_regex import lark_ascii_classes


@pytest.fixture(scope="module")
def llt():
    from model_optimizer.assets import reference_model_path

    tokenizer = load_tokenizer(reference_model_path())
    return ll_tokenizer(tokenizer, len(tokenizer), frozenset({2}))


def _takes(so: StructuredOutputs, text: str, llt) -> bool:  # noqa: ANN001
    _, m = matcher(so, llt)
    return m.consume_tokens(llt.tokenize_str(text)) and not m.is_error() and m.is_accepting()


CASES = [
    (r"\d", "7", "٣"),
    (r"\w", "a", "é"),
    (r"[\d_]", "_", "٣"),
    (r"[^\D]", "5", "٣"),
    (r"\W", "-", "é"),
]


@pytest.mark.parametrize(("regex", "ascii", "other"), CASES, ids=[c[0] for c in CASES])
def test_regexes_read_classes_as_a_json_schema_pattern_does(llt, regex, ascii, other):
    schema = StructuredOutputs.json({"type": "string", "pattern": f"^{regex}$"})
    as_schema = (_takes(schema, json.dumps(ascii), llt), _takes(schema, json.dumps(other, ensure_ascii=False), llt))
    tag = {"type": "tag", "begin": "<", "content": {"type": "regex", "pattern": regex}, "end": ">"}
    for so, wrap in [
        (StructuredOutputs.regex(regex), "{}"),
        (StructuredOutputs.grammar(f"start: /{regex}/"), "{}"),
        (StructuredOutputs.grammar(f'start: "a" b\nb: /{regex}/ // a comment with /\\d/ in it'), "a{}"),
        (StructuredOutputs.tag_format(tag), "<{}>"),
    ]:
        assert (_takes(so, wrap.format(ascii), llt), _takes(so, wrap.format(other), llt)) == as_schema, so


def test_whitespace_stays_unicode_as_in_a_schema_pattern(llt):
    for so in (StructuredOutputs.regex(r"\s"), StructuredOutputs.json({"type": "string", "pattern": r"^\s$"})):
        text = "\u00a0" if so.kind == "regex" else json.dumps("\u00a0", ensure_ascii=False)
        assert _takes(so, text, llt)


def test_lark_strings_comments_and_schemas_are_left_as_written():
    lark = (
        'start: "\\\\d/" x %json {"type": "string", "pattern": "^\\\\d/$"}\n'
        "x: /a\\/\\d+/i  // not /\\w/\n"
        'y: "quote \\" /\\d/"\n'
    )
    assert lark_ascii_classes(lark) == lark.replace("/a\\/\\d+/i", "/a\\/[0-9]+/i")
