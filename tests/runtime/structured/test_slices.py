"""Our slicer sets (grammar.SLICES) change what a mask costs, never its bits: the engine's masks equal
llguidance's own, with its default slices and with no slicer at all, all along walks through strings
under every `maxLength` around the slices' bounds, and the documents they end in satisfy the schema."""

from __future__ import annotations

import json

import jsonschema
import llguidance as llg
import numpy as np
import pytest

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.structured.compiler import GrammarCompiler
from model_optimizer.runtime.structured.grammar import SLICES, check, ll_tokenizer
from model_optimizer.runtime.structured.manager import StructuredOutputManager
from model_optimizer.runtime.structured.params import StructuredOutputs

SCHEMA = {
    "type": "object",
    "properties": {
        **{f"s{n}": {"type": "string", "maxLength": n} for n in (4, 9, 11, 19, 21, 31)},
        "free": {"type": "string", "maxLength": 45},
        "n": {"type": "integer", "minimum": 0, "maximum": 999},
    },
    "required": ["s4", "s9", "s11", "s19", "s21", "s31", "free", "n"],
    "additionalProperties": False,
}
EOS = 2
MAX_TOKENS = 400


@pytest.fixture(scope="module")
def tokenizer():
    from model_optimizer.assets import reference_model_path

    return load_tokenizer(reference_model_path())


@pytest.fixture(scope="module")
def references(tokenizer):
    """Matchers of the same grammar on llguidance's own tokenizers: default slices, and none."""
    vocab = len(tokenizer) + 5
    grammar = check(StructuredOutputs.json(SCHEMA))
    return [llg.LLMatcher(ll_tokenizer(tokenizer, vocab, frozenset({EOS}), s), grammar) for s in (None, ())]


def _bits(matcher) -> np.ndarray:
    return np.frombuffer(matcher.compute_bitmask(), dtype=np.int32)


def _walk(tokenizer, references, choose) -> str:
    """One request through the engine's manager; at every step its mask must equal each reference's."""
    manager = StructuredOutputManager(GrammarCompiler(tokenizer, len(tokenizer) + 5, frozenset({EOS})), threads=1)
    so = StructuredOutputs.json(SCHEMA)
    request = Request("r", [1], SamplingParams(structured_outputs=so))
    manager.start(request.request_id, manager.submit(so).result(timeout=60))
    matchers = [r.deep_copy() for r in references]
    try:
        for _ in range(MAX_TOKENS):
            mask = manager.fill([request]).bitmask[0]
            for reference in matchers:
                np.testing.assert_array_equal(mask, _bits(reference)[: mask.shape[0]])
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
            token = choose(allowed)
            assert token in allowed
            request.output_token_ids.append(token)
            for reference in matchers:
                assert reference.consume_token(token)
            ended = manager.advance([request])
            if ended:
                assert ended == [(request, None)]
                return tokenizer.decode(request.output_token_ids, skip_special_tokens=True)
    finally:
        manager.close()
    raise AssertionError(f"the grammar did not end within {MAX_TOKENS} tokens")


def test_our_slices_extend_llguidances_own():
    assert set(llg.LLTokenizer.general_slices()) <= set(SLICES)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_walks_give_llguidances_masks_and_valid_documents(tokenizer, references, seed):
    """Tokens drawn uniformly from each mask (what a model with random weights does): strings run to
    their bound, through every count of characters left."""
    rng = np.random.default_rng(seed)
    document = json.loads(_walk(tokenizer, references, lambda allowed: int(rng.choice(allowed))))
    jsonschema.validate(document, SCHEMA)
    assert any(len(document[f"s{n}"]) > 0 for n in (9, 11, 19, 21, 31))


def test_strings_filled_one_character_at_a_time_give_llguidances_masks(tokenizer, references):
    """Each string written to its maxLength one character at a time (the shortest allowed token that
    goes on with the text): every count of characters left, 45 down to 0, in every string."""
    text = json.dumps({k: "x" * v.get("maxLength", 0) for k, v in SCHEMA["properties"].items() if k != "n"})
    text = text[:-1].replace(" ", "") + ',"n":7}'
    pieces = [tokenizer.decode([t]) for t in range(len(tokenizer))]
    written = []

    def next_token(allowed: np.ndarray) -> int:
        rest = text[len("".join(written)) :]
        fits = [int(t) for t in allowed if t < len(pieces) and pieces[t] and rest.startswith(pieces[t])]
        token = min(fits, key=lambda t: len(pieces[t]))
        written.append(pieces[token])
        return token

    document = json.loads(_walk(tokenizer, references, next_token))
    assert document == json.loads(text)
    jsonschema.validate(document, SCHEMA)
