"""A longrope model as a draft model (Phi-3-mini-128k drafting for Phi-3-medium-128k: one vocabulary): its
factor list is chosen by the length the engine serves, as the target's is, so a draft that is the target itself
proposes exactly the target's tokens."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from tests.runtime.models.test_phi3 import ORIGINAL, build_longrope

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = [[7, 8, 9, 10] * 6, [100, 200] * 9 + [300], [5, 23, 41, 77, 3]]


@pytest.mark.parametrize("max_model_len", [ORIGINAL, None], ids=["short_factors", "long_factors"])
def test_a_longrope_draft_that_is_the_target_has_every_proposal_accepted(tiny_model, tmp_path, max_model_len):
    """With max_model_len within the original length the target rotates by the short factors; the draft took the
    long ones (chosen by its own 512-token context), so it proposed other tokens and most were rejected."""
    folder = build_longrope(tmp_path, "phi3_longrope", tiny_model("phi3"))
    spec = {"model": str(folder), "num_speculative_tokens": 3, "adaptive": False}
    kwargs = dict(dtype="float32", kv_cache_memory=1 << 24, max_model_len=max_model_len)
    plain = LLM(str(folder), **kwargs).generate(PROMPTS, GREEDY, use_tqdm=False)
    llm = LLM(str(folder), speculative_config=spec, **kwargs)
    drafted = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in drafted] == [o.outputs[0].token_ids for o in plain]
    stats = llm.engine.stats()
    assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens > 0
