"""n-gram lookup bounds as vLLM sets them: 5 and 5 when neither is given, one given alone sets both."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.spec_decode.config import to_json
from model_optimizer.runtime.spec_decode.speculator import Speculator
from tests.runtime.spec_decode.test_ngram_policy_config import _decoding

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "adaptive": False}


@pytest.mark.parametrize(
    ("given", "bounds"),
    [
        ({}, (5, 5)),
        ({"prompt_lookup_max": 3}, (3, 3)),
        ({"prompt_lookup_min": 7}, (7, 7)),
        ({"prompt_lookup_min": 2, "prompt_lookup_max": 6}, (2, 6)),
    ],
)
def test_bounds_follow_vllms_rule(given, bounds):
    spec = EngineConfig(speculative_config={**NGRAM, **given}).speculative
    assert (spec.prompt_lookup_min, spec.prompt_lookup_max) == bounds


def test_vllm_users_flag_gets_vllms_bounds_and_passes_them_on():
    spec = EngineConfig(speculative_config='{"method": "ngram", "num_speculative_tokens": 4}').speculative
    assert (spec.prompt_lookup_min, spec.prompt_lookup_max) == (5, 5)
    written = to_json(spec, for_vllm=True)
    assert '"prompt_lookup_min": 5' in written and '"prompt_lookup_max": 5' in written


def test_default_bounds_propose_only_after_a_five_token_repeat():
    """With the defaults a row whose last five tokens occurred before proposes what followed them; a row with
    only a two-token repeat has no match (the row is filled with its last token, as every unmatched row is)."""
    five = _decoding("five", [1, 2, 3, 4, 5, 9, 8, 1, 2, 3, 4, 5])
    two = _decoding("two", [5, 6, 7, 5, 6])
    defaults = Speculator(EngineConfig(speculative_config=NGRAM).speculative)
    assert defaults.propose([five, two]) == {"five": [9, 8, 1, 2], "two": [6, 6, 6, 6]}
    short = Speculator(EngineConfig(speculative_config={**NGRAM, "prompt_lookup_min": 1}).speculative)
    assert short.propose([two]) == {"two": [7, 5, 6, 6]}  # min 1 alone: max 1 too, the one-token suffix (6)
