"""The core's grammar state on the built-in model's tokenizer: compiles cached and off the caller's thread,
masks that allow a valid text's every token and forbid others, a finished grammar reported once."""

from __future__ import annotations

import numpy as np
import pytest

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured.compiler import GrammarCompiler
from model_optimizer.runtime.structured.grammar import GrammarError
from model_optimizer.runtime.structured.manager import StructuredOutputManager
from model_optimizer.runtime.structured.params import StructuredOutputs


@pytest.fixture(scope="module")
def tokenizer():
    from model_optimizer.assets import reference_model_path

    return load_tokenizer(reference_model_path())


@pytest.fixture()
def manager(tokenizer):
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({2})))
    yield manager
    manager.close()


def _allowed(mask_row: np.ndarray) -> set[int]:
    return set(np.flatnonzero(np.unpackbits(mask_row.view(np.uint8), bitorder="little")).tolist())


CASES = [
    (
        StructuredOutputs.json({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
        '{"a":12}',
    ),
    (StructuredOutputs.json_object(), '{"k":[1,"x"]}'),
    (StructuredOutputs.regex(r"[0-9]{3}-[a-z]{2}"), "123-ab"),
    (StructuredOutputs.choice(["yes", "no way"]), "no way"),
    (StructuredOutputs.grammar('start: "call(" NUM ")"\nNUM: /[0-9]+/'), "call(42)"),
]


@pytest.mark.parametrize(("so", "text"), CASES, ids=[c[0].kind for c in CASES])
def test_a_valid_text_is_allowed_token_by_token_and_its_end_stops_the_grammar(manager, tokenizer, so, text):
    compiled = manager.submit(so).result(timeout=60)
    request = Request("r", [1], SamplingParams(structured_outputs=so))
    manager.start("r", compiled)
    tokens = tokenizer.encode(text, add_special_tokens=False)
    for i, token in enumerate(tokens):
        mask = manager.fill([None, request])
        assert mask.mask_index.tolist() == [-1, 0]
        allowed = _allowed(mask.bitmask[0])
        assert token in allowed and len(allowed) < len(tokenizer)
        request.output_token_ids.append(token)
        ended = manager.advance([request])
        assert ended == ([] if i < len(tokens) - 1 else [(request, None)])
    assert manager.num_steps == len(tokens) and manager.max_seconds > 0


def test_a_grammar_that_can_go_on_allows_eos_once_it_is_complete(manager, tokenizer):
    so = StructuredOutputs.regex("[0-9]+")
    manager.start("r", manager.submit(so).result(timeout=60))
    request = Request("r", [1], SamplingParams(structured_outputs=so))
    assert 2 not in _allowed(manager.fill([request]).bitmask[0])  # nothing yet: EOS not allowed
    request.output_token_ids.append(tokenizer.encode("7", add_special_tokens=False)[0])
    assert manager.advance([request]) == []
    assert 2 in _allowed(manager.fill([request]).bitmask[0])
    request.output_token_ids.append(2)
    assert manager.advance([request]) == [(request, None)]


def test_a_token_outside_the_grammar_fails_the_request_alone(manager, tokenizer):
    so = StructuredOutputs.choice(["yes"])
    compiled = manager.submit(so).result(timeout=60)
    good, bad = (Request(rid, [1], SamplingParams(structured_outputs=so)) for rid in ("good", "bad"))
    manager.start("good", compiled)
    manager.start("bad", compiled)
    good.output_token_ids.append(tokenizer.encode("yes", add_special_tokens=False)[0])
    bad.output_token_ids.append(tokenizer.encode("no", add_special_tokens=False)[0])
    ended = dict(manager.advance([good, bad]))
    assert bad in ended and "left its grammar" in ended[bad] and ended.get(good) is None


def test_rows_without_a_live_matcher_need_no_mask(manager):
    so = StructuredOutputs.regex("a+")
    manager.start("r", manager.submit(so).result(timeout=60))
    finished = Request("r", [1], SamplingParams(structured_outputs=so))
    finished.status = finished.status.FINISHED_ABORTED
    assert manager.fill([None, finished, Request("free", [1], SamplingParams())]) is None
    manager.drop("r")
    assert not manager.has("r") and manager.num_matchers == 0


def test_compiles_are_cached_per_constraint_and_failures_carry_the_reason(manager):
    first = manager.submit(StructuredOutputs.regex("a+"))
    assert manager.submit(StructuredOutputs.regex("a+")) is first
    assert manager.submit(StructuredOutputs.regex("b+")) is not first
    bad = manager.submit(StructuredOutputs.json({"type": "integer", "minimum": 3, "maximum": 1}))
    with pytest.raises(GrammarError, match="minimum"):
        bad.result(timeout=60)
    assert manager.submit(StructuredOutputs.json({"type": "integer", "minimum": 3, "maximum": 1})) is bad


def test_a_word_level_tokenizer_without_a_decoder_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from model_optimizer.runtime.models.fast_tokenizer import FastTokenizer
    from model_optimizer.runtime.structured.grammar import ll_tokenizer

    backend = Tokenizer(models.WordLevel({"w0": 0, "w1": 1}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    with pytest.raises(ValueError, match="structured outputs are not available for this tokenizer"):
        ll_tokenizer(FastTokenizer(tmp_path, backend, {"eos_token": "w1"}), 2, frozenset({1}))
