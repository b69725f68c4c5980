"""The constraint checks' own process: verdicts as the engine core would find them, and a child that dies
or overruns costs a refusal and a restart, never the caller."""

from __future__ import annotations

import os
import signal

import pytest

from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.sandbox import GrammarSandbox, TokenizerSpec


@pytest.fixture
def sandbox():
    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import tokenizer_spec

    tokenizer = load_tokenizer(reference_model_path())
    box = GrammarSandbox(TokenizerSpec(*tokenizer_spec(tokenizer, len(tokenizer), [])), 30.0)
    yield box
    box.close()


def test_verdicts_are_the_cores_with_the_models_tokenizer(sandbox):
    assert sandbox.check(StructuredOutputs.regex("a+")) == ""
    assert sandbox.check(StructuredOutputs.json(True)) == ""  # any JSON value
    assert "admits no document" in sandbox.check(StructuredOutputs.json(False))
    assert "unknown special token" in sandbox.check(StructuredOutputs.grammar("start: <|nonexistent|>"))
    assert "too large" in sandbox.check(StructuredOutputs.grammar("start: <[99999999]>"))
    assert sandbox.restarts == 0


def test_a_child_that_died_between_checks_is_replaced(sandbox):
    assert sandbox.check(StructuredOutputs.regex("b+")) == ""
    os.kill(sandbox._child.pid, signal.SIGKILL)
    sandbox._child.wait()
    assert sandbox.check(StructuredOutputs.regex("c+")) == ""
    assert sandbox.restarts == 1


def test_a_check_past_its_time_kills_the_child(sandbox):
    assert sandbox.check(StructuredOutputs.regex("d+")) == ""
    sandbox.timeout_s = 0.0
    assert "within 0 s" in sandbox.check(StructuredOutputs.regex("[a-z]{1,40}@[a-z]{2,9}"))
    assert sandbox.restarts == 1 and sandbox._child is None
    sandbox.timeout_s = 30.0
    assert sandbox.check(StructuredOutputs.regex("[a-z]{1,40}@[a-z]{2,9}")) == ""


def test_llguidance_crashes_stay_in_the_child(sandbox):
    """llguidance 1.9.1 segfaults checking this schema: the check is a refusal, the next gets a new child.
    (A later llguidance may take or refuse the schema instead; the caller lives either way.)"""
    verdict = sandbox.check(StructuredOutputs.json({"const": -(2**63)}))
    if "its process ended" in verdict:
        assert sandbox.restarts == 1
    else:
        assert verdict == "" or "invalid json" in verdict
    assert sandbox.check(StructuredOutputs.regex("e+")) == ""


@pytest.mark.parametrize(
    ("so", "reason"),
    [
        (  # a tree whose every node needs a child: it can never end, and the first token finds that out
            StructuredOutputs.json(
                {
                    "type": "object",
                    "properties": {"children": {"type": "array", "items": {"$ref": "#"}, "minItems": 1}},
                    "required": ["children"],
                }
            ),
            "Too many items",
        ),
        (StructuredOutputs.regex("(ab{1000}){1000}"), "too many expressions"),
        (
            StructuredOutputs.json(
                {
                    "anyOf": [
                        {"type": "object", "properties": {f"k{i}": {"type": "string"}}, "required": [f"k{i}"]}
                        for i in range(2001)
                    ]
                }
            ),
            "max is 2000",
        ),
    ],
    ids=["endless-tree", "regex-states", "anyof-2001"],
)
def test_limits_met_at_the_first_token_are_refusals(sandbox, so, reason):
    """llguidance accepts these and gives a first mask, then fails taking any token: in the core that was a
    500 after admission. The verdict takes one allowed token, so they are refused up front, without the
    parser state llguidance dumps after its reason."""
    verdict = sandbox.check(so)
    assert reason in verdict and "fails on its first token" in verdict
    assert "<state>" not in verdict
    assert sandbox.restarts == 0


def test_a_child_that_cannot_start_is_no_verdict_and_is_not_kept():
    """A start failure is no verdict (a 503 with Retry-After, "try again") and stays out of the server's
    cache: the next request checks anew."""
    import asyncio

    from model_optimizer.runtime.server.structured import ConstraintChecker
    from model_optimizer.runtime.structured.sandbox import SandboxUnavailable

    broken = GrammarSandbox(TokenizerSpec("not a tokenizer.json", 10, (0,)), 30.0)
    with pytest.raises(SandboxUnavailable, match="could not start"):
        broken.check(StructuredOutputs.regex("a+"))
    checker = ConstraintChecker(state=None)  # type: ignore[arg-type]
    checker._sandboxes.append(broken)
    checker._idle.put(broken)  # the one sandbox: the checks come one at a time, each puts it back
    so = StructuredOutputs.regex("a+")
    for _ in range(2):
        with pytest.raises(SandboxUnavailable, match="try again"):
            asyncio.run(checker.verdict(so))  # the server answers it with a 503 and Retry-After
    assert checker._verdicts.get(so) is None and broken.restarts == 3  # one start tried per check
    checker.close()


def test_a_constraint_whose_masks_are_too_slow_is_refused(monkeypatch):
    """The verdict times the first mask and the one after a token: past MAX_MASK_S it is a refusal naming the
    mask (the engine would stall every request in the batch on it at each step). The limit is lowered to
    nothing here rather than a schema made slow, so that no host's speed decides the test."""
    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured import sandbox as sandbox_module
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    tokenizer = load_tokenizer(reference_model_path())
    ll = ll_tokenizer(tokenizer, len(tokenizer), [])
    schema = StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "string"}}})
    assert sandbox_module.verdict(schema, ll) == ""
    monkeypatch.setattr(sandbox_module, "MAX_MASK_S", 0.0)
    reason = sandbox_module.verdict(schema, ll)
    assert "json's first token mask took" in reason and "simplify it" in reason
