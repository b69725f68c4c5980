"""`mopt tune`'s speculative-decoding knobs: speculative_method and num_speculative_tokens become each
trial's speculative_config, and impossible values are refused before any server starts."""

from __future__ import annotations

import json

import pytest

from model_optimizer.optimizer.tune.space import Knob, SearchSpace, build_space, parse_fix


def test_knobs_make_the_trial_config(tmp_path):
    draft = tmp_path / "draft"
    draft.mkdir()
    space = SearchSpace(
        [
            Knob("speculative_method", choices=["off", "ngram", str(draft)]),
            Knob("num_speculative_tokens", choices=[2, 5]),
        ]
    )
    ngram = space.settings({"speculative_method": "ngram", "num_speculative_tokens": 5})
    assert json.loads(ngram["speculative_config"]) == {"method": "ngram", "num_speculative_tokens": 5}
    with_draft = space.settings({"speculative_method": str(draft), "num_speculative_tokens": 2})
    assert json.loads(with_draft["speculative_config"]) == {"model": str(draft), "num_speculative_tokens": 2}
    assert space.settings({"speculative_method": "off", "num_speculative_tokens": 2})["speculative_config"] is None
    assert "speculative_method" not in ngram and "num_speculative_tokens" not in ngram


def test_a_token_count_alone_changes_a_fixed_config():
    fixed = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}'
    space = SearchSpace([Knob("num_speculative_tokens", choices=[1, 6])], {"speculative_config": fixed})
    config = json.loads(space.settings({"num_speculative_tokens": 6})["speculative_config"])
    assert config == {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 3}


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        (Knob("num_speculative_tokens", choices=[0, 4]), "num_speculative_tokens must be an integer"),
        (Knob("speculative_method", choices=["medusa"]), "off, ngram or a draft model's folder"),
        (Knob("num_speculative_tokens", low=1, high=4), "list of choices"),
    ],
)
def test_impossible_values_are_refused(knob, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace([knob])


def test_fix_parses_the_knobs():
    assert parse_fix("num_speculative_tokens=3") == ("num_speculative_tokens", 3)
    space = build_space(fixes=["speculative_method=ngram", "num_speculative_tokens=3"])
    assert "speculative_config" in space.settings({})
