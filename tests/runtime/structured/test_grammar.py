"""Constraints as plain data, their llguidance grammars, and the errors a bad one gets (the 400s' reasons)."""

from __future__ import annotations

import msgspec
import pytest

from model_optimizer.runtime.engine.messages import CoreRequest, decode_command, encode
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured.grammar import GrammarError, check
from model_optimizer.runtime.structured.params import StructuredOutputs


def test_constraints_travel_to_the_core_and_compare_by_value():
    so = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}}, whitespace_flexible=True)
    request = CoreRequest("r", [1, 2], SamplingParams(structured_outputs=so), 8)
    back = decode_command(encode(request))
    assert back.params.structured_outputs == so and hash(back.params.structured_outputs) == hash(so)
    assert StructuredOutputs.choice(["a", "b"]) == StructuredOutputs("choice", '["a", "b"]')


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StructuredOutputs("xml", "<a/>"), "kind must be one of"),
        (lambda: StructuredOutputs.json("{nope"), "not valid JSON"),
        (lambda: StructuredOutputs.json("[1]"), "must be an object"),
        (lambda: StructuredOutputs.choice([]), "non-empty list"),
        (lambda: StructuredOutputs.choice(["a", ""]), "non-empty list"),
        (lambda: StructuredOutputs.regex(""), "must not be empty"),
        (lambda: SamplingParams(structured_outputs="json"), "must be a StructuredOutputs"),
        (lambda: SamplingParams(structured_outputs={"regex": "a", "choice": ["a"]}), "exactly one"),
        (lambda: SamplingParams(structured_outputs={"jsn": {}}), "got jsn"),
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
    ],
)
def test_what_llguidance_cannot_enforce_is_refused_with_its_reason(so, reason):
    with pytest.raises(GrammarError, match=None) as info:
        check(so)
    assert reason in str(info.value) and str(info.value).startswith(f"invalid {so.kind}:")
