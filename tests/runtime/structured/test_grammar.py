"""Constraints as plain data, their llguidance grammars, and the errors a bad one gets (the 400s' reasons)."""

from __future__ import annotations

import json
from dataclasses import replace

import msgspec
import pytest

from model_optimizer.runtime.engine.messages import CoreRequest, decode_command, encode
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured.grammar import GrammarError, check
from model_optimizer.runtime.structured.params import StructuredOutputs


def test_constraints_travel_to_the_core_and_compare_by_value():
    so = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}}, whitespace_flexible=True)
    so = replace(so, reasoning_start="<think>", reasoning_end="</think>")
    request = CoreRequest("r", [1, 2], SamplingParams(structured_outputs=so, logit_bias={7: -2.5}), 8)
    back = decode_command(encode(request))
    assert back.params.structured_outputs == so and hash(back.params.structured_outputs) == hash(so)
    assert back.params.logit_bias == {7: -2.5}
    assert StructuredOutputs.choice(["a", "b"]) == StructuredOutputs("choice", '["a", "b"]')


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StructuredOutputs("xml", "<a/>"), "kind must be one of"),
        (lambda: StructuredOutputs.json("{nope"), "not valid JSON"),
        (lambda: StructuredOutputs.json("[1]"), "must be an object"),
        (lambda: StructuredOutputs.choice([]), "non-empty list"),
        (lambda: StructuredOutputs.choice(["a", ""]), "non-empty list"),
        (lambda: StructuredOutputs.choice("abc"), "list of strings, got the string 'abc'"),
        (lambda: SamplingParams(structured_outputs={"choice": "abc"}), "list of strings"),
        (lambda: StructuredOutputs.regex(""), "must not be empty"),
        (lambda: SamplingParams(structured_outputs="json"), "must be a StructuredOutputs"),
        (lambda: SamplingParams(structured_outputs={"regex": "a", "choice": ["a"]}), "exactly one"),
        (lambda: SamplingParams(structured_outputs={"jsn": {}}), "got jsn"),
        (lambda: StructuredOutputs.structural_tag([], ["<f"]), "structures must be a non-empty list"),
        (lambda: StructuredOutputs.structural_tag([{"begin": "<f>"}], []), "triggers must be a non-empty list"),
        (lambda: StructuredOutputs.structural_tag([{"begin": "<g>"}], ["<f"]), "starts with none of the triggers"),
        (lambda: StructuredOutputs.structural_tag([{"begin": "<f>", "schema": 3}], ["<f"]), "must be a JSON schema"),
        (lambda: StructuredOutputs.structural_tag([{"begin": "<f>", "args": {}}], ["<f"]), "begin, schema and end"),
        (lambda: SamplingParams(structured_outputs={"structural_tag": "[1]"}), "must be an object"),
        (lambda: StructuredOutputs("regex", "a+", whitespace_pattern=" *"), "applies to JSON"),
        (lambda: StructuredOutputs.json({}, whitespace_pattern=3), "must be a string"),
        (lambda: StructuredOutputs("regex", "a", reasoning_start="<think>"), "needs reasoning_end"),
        (lambda: SamplingParams(logit_bias={-1: 1.0}), "logit_bias must map"),
        (lambda: SamplingParams(logit_bias={5: float("nan")}), "logit_bias must map"),
        (lambda: SamplingParams(logit_bias={"5": 1.0}), "logit_bias must map"),
    ],
)
def test_malformed_constraints_are_value_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_dict_in_vllms_shape_is_converted():
    params = SamplingParams(structured_outputs={"json": {"type": "object"}, "whitespace_flexible": True})
    assert params.structured_outputs == StructuredOutputs.json({"type": "object"}, whitespace_flexible=True)
    assert SamplingParams(structured_outputs={"json_object": True}).structured_outputs.kind == "json_object"
    assert SamplingParams(structured_outputs={"choice": ["a", "b"]}).structured_outputs == StructuredOutputs.choice(
        ["a", "b"]
    )
    tag = {"structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}], "triggers": ["<f"]}
    expected = StructuredOutputs.structural_tag(tag["structures"], tag["triggers"])
    for value in (tag, json.dumps(tag)):  # vLLM sends the tag as JSON text
        assert SamplingParams(structured_outputs={"structural_tag": value}).structured_outputs == expected


def test_vllms_params_classes_are_converted_with_vllms_flags():
    from model_optimizer.runtime.structured import GuidedDecodingParams, StructuredOutputsParams

    schema = {"type": "object", "properties": {"a": {"type": "object"}, "b": {"patternProperties": {"^x": {}}}}}
    made = StructuredOutputsParams(json=json.dumps(schema), disable_additional_properties=True).to_structured_outputs()
    assert json.loads(made.spec) == {  # vLLM's rule: objects with named properties close, free-form ones stay open
        "type": "object",
        "properties": {"a": {"type": "object"}, "b": {"patternProperties": {"^x": {}}, "additionalProperties": False}},
        "additionalProperties": False,
    }
    # whitespace: compact when left out or True (the server's default), bounded runs when False
    assert not StructuredOutputsParams(json_object=True).to_structured_outputs().whitespace_flexible
    assert (
        not StructuredOutputsParams(json=schema, disable_any_whitespace=True)
        .to_structured_outputs()
        .whitespace_flexible
    )
    assert (
        StructuredOutputsParams(json=schema, disable_any_whitespace=False).to_structured_outputs().whitespace_flexible
    )
    pattern = StructuredOutputsParams(json=schema, whitespace_pattern="[ ]?").to_structured_outputs()
    assert pattern.whitespace_pattern == "[ ]?"
    assert GuidedDecodingParams(grammar='start: "a"').to_structured_outputs() == StructuredOutputs.grammar('start: "a"')
    assert SamplingParams(guided_decoding={"regex": "a+"}).structured_outputs == StructuredOutputs.regex("a+")
    for bad, message in [
        (dict(structured_outputs=StructuredOutputsParams()), "exactly one of"),
        (dict(structured_outputs=StructuredOutputsParams(regex="a", choice=["b"])), "exactly one of"),
        (dict(structured_outputs=StructuredOutputsParams(regex="a", whitespace_pattern=" ")), "goes with json"),
        (
            dict(structured_outputs=StructuredOutputsParams(regex="a", disable_additional_properties=True)),
            "goes with json",
        ),
        (dict(structured_outputs={"regex": "a"}, guided_decoding={"regex": "b"}), "not both"),
        (dict(structured_outputs=StructuredOutputsParams(json="{not json")), "JSON"),
    ]:
        with pytest.raises(ValueError, match=message):
            SamplingParams(**bad)


def test_a_forged_message_is_checked_as_it_is_decoded():
    """The core decodes the frontend's messages with msgspec, which runs the same checks."""
    good = encode(CoreRequest("r", [1], SamplingParams(structured_outputs=StructuredOutputs.regex("a+")), 8))
    forged = good.replace(b"regex", b"xxxxx")
    with pytest.raises((ValueError, msgspec.ValidationError)):
        decode_command(forged)


@pytest.mark.parametrize(
    ("so", "reason"),
    [
        (StructuredOutputs.json({"not": {"type": "string"}}), 'Unimplemented keys: ["not"]'),
        (StructuredOutputs.json({"type": "array", "uniqueItems": True}), "uniqueItems"),
        (StructuredOutputs.json({"type": "integer", "minimum": 10, "maximum": 5}), "minimum (10) is greater"),
        (StructuredOutputs.json({"$ref": "#/$defs/nope"}), "does not exist"),
        (StructuredOutputs.json({"type": "string", "pattern": "(?=a)b"}), "look-around"),
        (StructuredOutputs.regex("[a-"), "unclosed character class"),
        (StructuredOutputs.grammar("start: x\n"), "x"),
        (StructuredOutputs.structural_tag([{"begin": "<f>", "schema": {"not": {}}}], ["<f"]), "Unimplemented keys"),
        (StructuredOutputs.structural_tag([{"begin": "<f>", "schema": False}], ["<f"]), "nothing can follow it"),
        (StructuredOutputs.json({"type": "object"}, whitespace_pattern="(("), "unclosed group"),
        (StructuredOutputs.json({"type": "integer", "minimum": 10**19}), "outside 64-bit integers"),  # was clamped
        (StructuredOutputs.json({"items": {"exclusiveMaximum": -(2**64)}}), "outside 64-bit integers"),
        (StructuredOutputs.json({"const": 2**53 + 1}), "const holds 9007199254740993"),  # was written rounded
        (StructuredOutputs.json({"properties": {"id": {"enum": [1, {"a": [2**60 + 1]}]}}}), "enum holds 1152921"),
        (StructuredOutputs.json({"type": "integer", "minimum": 2**53 + 1, "maximum": 2**53 + 1}), "both 9007"),
        (StructuredOutputs.structural_tag([{"begin": "<f>", "schema": {"const": 2**60 + 1}}], ["<f"]), "const holds"),
        (StructuredOutputs.json(False), "admits no document"),
    ],
)
def test_what_llguidance_cannot_enforce_is_refused_with_its_reason(so, reason):
    with pytest.raises(GrammarError, match=None) as info:
        check(so)
    assert reason in str(info.value) and str(info.value).startswith(f"invalid {so.kind}:")


def test_a_structural_tag_leaves_text_free_and_forces_each_structure_after_its_trigger():
    """Text outside the tags is free; once a trigger is written, only the begin of one of its structures
    may follow, then compact JSON valid under that structure's schema, then its end."""
    import llguidance as llg

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    tokenizer = load_tokenizer(reference_model_path())
    weather = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
    so = StructuredOutputs.structural_tag(
        [
            {"begin": "<function=get_weather>", "schema": weather, "end": "</function>"},
            {"begin": "<function=get_time>", "schema": True, "end": "</function>"},
        ],
        ["<function="],
    )
    ll = ll_tokenizer(tokenizer, len(tokenizer) + 5, frozenset({2}))
    grammar = check(so, ll)

    def taken(text: str) -> bool:
        tokens = tokenizer.encode(text, add_special_tokens=False)
        return llg.LLMatcher(ll, grammar).try_consume_tokens(tokens) == len(tokens)

    assert taken('Sure. <function=get_weather>{"city":"Oslo"}</function> and <function=get_time>[1]</function>!')
    assert taken("no call at all, <function is not the trigger")
    assert not taken('<function=get_weather>{"city":"Rome"}</function>')  # outside the schema
    assert not taken('<function=get_weather>{"city": "Oslo"}</function>')  # not compact
    assert not taken('<function=get_weather>{"city":"Oslo"} done')  # the end is forced
    assert not taken("<function=get_news>{}</function>")  # no structure begins so


def test_a_whitespace_pattern_is_the_whitespace_json_may_have():
    import llguidance as llg

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    tokenizer = load_tokenizer(reference_model_path())
    ll = ll_tokenizer(tokenizer, len(tokenizer) + 5, frozenset({2}))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}

    def taken(so: StructuredOutputs, text: str) -> bool:
        tokens = tokenizer.encode(text, add_special_tokens=False)
        return llg.LLMatcher(ll, check(so, ll)).try_consume_tokens(tokens) == len(tokens)

    one_space = StructuredOutputs.json(schema, whitespace_pattern="[ ]?")
    assert taken(one_space, '{"a": 1}') and taken(one_space, '{ "a" : 1 }') and taken(one_space, '{"a":1}')
    assert not taken(one_space, '{"a":  1}') and not taken(one_space, '{"a":\n1}')
    assert not taken(StructuredOutputs.json(schema), '{"a": 1}')  # compact by default


ANSWERS = [
    (
        StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
        '{"a":1}',
    ),
    (StructuredOutputs.json_object(), '{"b":[]}'),
    (StructuredOutputs.regex("(yes|no)"), "yes"),
    (StructuredOutputs.choice(["x y", "z"]), "x y"),
    (StructuredOutputs.grammar('start: "A" /[0-9]+/'), "A12"),
    (StructuredOutputs.grammar('root ::= "A" [0-9]+'), "A12"),  # GBNF
]


@pytest.mark.parametrize(("so", "answer"), ANSWERS, ids=[so.kind + str(i) for i, (so, _) in enumerate(ANSWERS)])
@pytest.mark.parametrize("as_token", [False, True], ids=["tags-as-text", "tags-as-tokens"])
def test_a_constraint_after_reasoning_leaves_the_thinking_free(so, answer, as_token, tmp_path):
    """With a reasoning parser the server moves the constraint after the block: free text up to the end
    tag (the first one closes it), up to four whitespace characters, then the answer, of every kind. With
    reasoning_start the block is optional. Tags that are added tokens (Qwen3's) match as those tokens."""
    taken = _matching(tmp_path, ["<think>", "</think>"] if as_token else [])
    required = replace(so, reasoning_end="</think>")
    assert taken(required, f"plan {{ not JSON < </think>\n\n{answer}")
    assert taken(required, f"</think>{answer}")
    assert not taken(required, answer)  # the block must close first
    assert not taken(required, "plan </think> nope")
    assert not taken(required, f"a</think>b</think>{answer}")  # the first end tag closes it
    assert not taken(required, f"a</think>\n\n\n\n\n{answer}")  # at most four whitespace characters
    optional = replace(so, reasoning_start="<think>", reasoning_end="</think>")
    assert taken(optional, answer) and taken(optional, f"<think>plan</think>\n{answer}")
    assert not taken(optional, f"plan</think>{answer}")


def _matching(folder, added: list[str]):
    """taken(constraint, text): whether the built-in model's tokenizer (with `added` tokens, not special,
    as Qwen's own <think> and <tool_call>) spells `text` in tokens the constraint takes to its end."""
    import llguidance as llg
    from transformers import PreTrainedTokenizerFast

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    source = reference_model_path()
    if added:
        hf = PreTrainedTokenizerFast.from_pretrained(str(source))
        hf.add_tokens(added)
        hf.save_pretrained(str(folder))
        source = folder
    tokenizer = load_tokenizer(source)
    ll = ll_tokenizer(tokenizer, len(tokenizer) + 5, frozenset({2}))

    def taken(constraint: StructuredOutputs, text: str) -> bool:
        tokens = tokenizer.encode(text, add_special_tokens=False)
        matcher = llg.LLMatcher(ll, check(constraint, ll))
        return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()

    return taken


def test_a_structural_tag_trigger_that_is_a_token_triggers_as_that_token(tmp_path):
    """Qwen's <tool_call> is an added token, which llguidance keeps out of text: as a text trigger the model
    could not write its own token; the trigger is that token."""
    taken = _matching(tmp_path, ["<tool_call>", "</tool_call>"])
    weather = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
    begin = '<tool_call>{"name": "get_weather", "arguments": '
    so = StructuredOutputs.structural_tag(
        [{"begin": begin, "schema": weather, "end": "}</tool_call>"}], ["<tool_call>"]
    )
    assert taken(so, 'Let me look. <tool_call>{"name": "get_weather", "arguments": {"city":"Oslo"}}</tool_call> ok')
    assert not taken(so, '<tool_call>{"name": "get_weather", "arguments": {"city":"Rome"}}</tool_call>')
    assert taken(so, "no call at all")


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
THINK = {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"}
CALL = {
    "type": "tag",
    "begin": "<function=get_weather>",
    "content": {"type": "json_schema", "json_schema": WEATHER_SCHEMA},
    "end": "</function>",
}
TRIGGERED = {"type": "triggered_tags", "triggers": ["<function="], "tags": [CALL]}
FORMATS = [
    ({"type": "const_string", "value": "Hi!"}, ["Hi!"], ["Hi"]),
    ({"type": "json_schema", "json_schema": WEATHER_SCHEMA}, ['{"city":"Oslo"}'], ['{"city":"Rome"}']),
    ({"type": "regex", "pattern": "[A-Z]{3}-[0-9]{2}/x"}, ["ABC-12/x"], ["AB-12"]),
    ({"type": "grammar", "grammar": 'root ::= "yes" | "no"'}, ["yes"], ["maybe"]),
    (THINK, ["<think>hmm a b</think>"], ["<think>a</think>b"]),
    (
        {"type": "sequence", "elements": [THINK, {"type": "const_string", "value": "\nA: "}, CALL["content"]]},
        ['<think>x y</think>\nA: {"city":"Paris"}'],
        ['<think>x</think>\nA: {"city":"X"}'],
    ),
    ({"type": "or", "elements": [{"type": "const_string", "value": v} for v in ("yes", "no")]}, ["no"], ["nope"]),
    (
        {"type": "repeat", "min": 1, "max": 2, "content": {"type": "const_string", "value": "ab"}},
        ["abab"],
        ["ababab", ""],
    ),
    (
        TRIGGERED,
        ['hello <function=get_weather>{"city":"Oslo"}</function> bye', "no call"],
        ['x <function=get_weather>{"city":"Rome"}</function>'],
    ),
    ({**TRIGGERED, "at_least_one": True}, ['<function=get_weather>{"city":"Oslo"}</function>'], ["no call"]),
    (
        {**TRIGGERED, "stop_after_first": True},
        ['a <function=get_weather>{"city":"Oslo"}</function>'],
        ['a <function=get_weather>{"city":"Oslo"}</function> more'],
    ),
    (
        {"type": "tags_with_separator", "tags": [CALL], "separator": ",", "at_least_one": True},
        ['<function=get_weather>{"city":"Oslo"}</function>,<function=get_weather>{"city":"Paris"}</function>'],
        ["", "free text"],
    ),
    ({"type": "any_text", "excludes": ["bad"]}, ["good text"], ["a bad one"]),
    (
        {"type": "tag", "begin": "<r>", "content": {"type": "any_text"}, "end": ["</r>", "</a>"]},
        ["<r>x</a>", "<r>x</r>"],
        [],
    ),
    # a greedy regex before text it could take: one lexeme, so that it can stop (xgrammar takes these)
    (
        {"type": "tag", "begin": "<a>", "content": {"type": "regex", "pattern": ".*"}, "end": ["</a>", "</b>"]},
        ["<a>hi there</a>", "<a></b>"],
        ["<a>hi"],
    ),
    # ... which ends at the first end, so that the text after a triggered tag may go on on its line
    (
        {
            "type": "triggered_tags",
            "triggers": ["<a>"],
            "tags": [{"type": "tag", "begin": "<a>", "content": {"type": "regex", "pattern": ".*"}, "end": "</a>"}],
        },
        ["x <a>hi</a> more", "<a>hi</a>\nmore <a></a>"],
        ["x <a>hi"],
    ),
    (
        {
            "type": "sequence",
            "elements": [{"type": "regex", "pattern": "^[0-9]+$"}, {"type": "const_string", "value": "0!"}],
        },
        ["1230!", "00!"],
        ["12!"],
    ),
    # alternatives and repeats of text and regexes join too: [0-9]+ then one of "0!" / "x"
    (
        {
            "type": "sequence",
            "elements": [
                {"type": "regex", "pattern": "[0-9]+"},
                {
                    "type": "or",
                    "elements": [{"type": "const_string", "value": "0!"}, {"type": "const_string", "value": "x"}],
                },
            ],
        },
        ["10!", "12x", "00!"],
        ["1!", "x"],
    ),  # fmt: skip
    (
        {
            "type": "sequence",
            "elements": [
                {"type": "star", "content": {"type": "regex", "pattern": "[a-z]"}},
                {"type": "optional", "content": {"type": "const_string", "value": "z"}},
                {"type": "const_string", "value": "z!"},
            ],
        },
        ["abz!", "azz!", "z!"],
        ["ab!"],
    ),  # fmt: skip
    # ends of which one starts another: greedy, so that the longer end can be the one written
    (
        {"type": "tag", "begin": "<a>", "content": {"type": "regex", "pattern": "[a-z]*"}, "end": ["</a>", "</a>!"]},
        ["<a>hi</a>!", "<a>hi</a>"],
        ["<a>hi</a>?"],
    ),
    # a trigger of text and a token: the text ends the free text, the token follows forced
    (
        {
            "type": "triggered_tags",
            "triggers": ["call<tool_call>"],
            "tags": [
                {
                    "type": "tag",
                    "begin": "call<tool_call>",
                    "content": {"type": "json_schema", "json_schema": WEATHER_SCHEMA},
                    "end": "</tool_call>",
                }
            ],
        },
        ['so I call<tool_call>{"city":"Oslo"}</tool_call> ok', "no trigger"],
        ['a call<tool_call>{"city":"Rome"}</tool_call>', "a call then"],
    ),
    # a regex that cannot be joined as it is (anchors inside, flags) keeps its own lexeme, as before
    (
        {
            "type": "sequence",
            "elements": [{"type": "regex", "pattern": "^a$|^b$"}, {"type": "const_string", "value": "c"}],
        },
        ["ac", "bc"],
        ["c"],
    ),
    (
        {
            "type": "sequence",
            "elements": [{"type": "regex", "pattern": "(?x)a # c"}, {"type": "const_string", "value": "c"}],
        },
        ["ac"],
        ["a"],
    ),
]


@pytest.mark.parametrize(("fmt", "good", "bad"), FORMATS, ids=[f"{i}-{f[0]['type']}" for i, f in enumerate(FORMATS)])
def test_vllms_newer_structural_tag_formats(fmt, good, bad, tmp_path):
    """xgrammar's tree of formats, as vLLM takes it in response_format / structured_outputs."""
    taken = _matching(tmp_path, ["<tool_call>", "</tool_call>"] if "<tool_call>" in json.dumps(fmt) else [])
    so = SamplingParams(
        structured_outputs={"structural_tag": {"type": "structural_tag", "format": fmt}}
    ).structured_outputs
    assert so == StructuredOutputs.tag_format(fmt)
    for text in good:
        assert taken(so, text), text
    for text in bad:
        assert not taken(so, text), text


@pytest.mark.parametrize(
    ("fmt", "reason"),
    [
        ({"type": "token", "token": "<x>"}, "'token' is not supported"),
        ({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}, "only the JSON style"),
        ({"type": "any_text", "max_tokens": 5}, "max_tokens is not supported"),
        ({"type": "triggered_tags", "triggers": ["<g"], "tags": [CALL]}, "starts with none of the triggers"),
        ({"type": "sequence", "elements": []}, "non-empty list"),
        # a node without the keys of its kind: a 400 naming them, not a KeyError in the grammar's process
        ({"type": "json_schema"}, "a json_schema needs json_schema"),
        ({"type": "repeat", "content": {"type": "any_text"}}, "a repeat needs min and max"),
        ({"type": "tag", "begin": "<a>", "end": "</a>"}, "a tag needs content"),
        ({"type": "repeat", "content": {"type": "any_text"}, "min": "1", "max": 2}, "min must be an integer"),
    ],
)
def test_structural_tag_formats_not_taken_are_refused_by_name(fmt, reason):
    with pytest.raises(ValueError, match=reason):
        StructuredOutputs.tag_format(fmt)


def test_a_newer_format_trigger_that_is_a_token_triggers_as_that_token(tmp_path):
    taken = _matching(tmp_path, ["<tool_call>", "</tool_call>"])
    call = {**CALL, "begin": "<tool_call>get_weather ", "end": "</tool_call>"}
    so = StructuredOutputs.tag_format({"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [call]})
    assert taken(so, 'ok <tool_call>get_weather {"city":"Oslo"}</tool_call> done')
    assert not taken(so, '<tool_call>get_weather {"city":"Rome"}</tool_call>')


def test_free_text_in_a_tag_ends_at_an_end_that_is_a_token(tmp_path):
    """xgrammar's reasoning tag, `<think>` any text `</think>`, with Qwen3's tags as added tokens."""
    taken = _matching(tmp_path, ["<think>", "</think>"])
    fmt = {"type": "sequence", "elements": [THINK, {"type": "json_schema", "json_schema": WEATHER_SCHEMA}]}
    so = StructuredOutputs.tag_format(fmt)
    assert taken(so, '<think>plan a b</think>{"city":"Oslo"}')
    assert not taken(so, '<think>plan</think>{"city":"Rome"}')


@pytest.mark.parametrize(
    ("error", "over"),
    [
        ("Parser Error: Current row has 2003 items; max is 2000", True),
        ("Too many items (limit 500000)", True),
        ('token " limit" doesn\'t satisfy the grammar', False),  # a token's text is no limit
        ("rollback: too many bytes", False),  # the engine's own failure
    ],
)
def test_only_the_grammar_engines_limits_are_the_constraints_fault(error, over):
    from model_optimizer.runtime.structured.grammar import OVER_LIMITS, output_error

    class Failed:  # what a failed llguidance matcher answers
        def get_error(self) -> str:
            return error + "\n<state>counters</state>"

    message = output_error(Failed())
    assert message.startswith(OVER_LIMITS) == over and message.endswith(error)
