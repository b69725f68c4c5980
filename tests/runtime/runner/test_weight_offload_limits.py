"""--cpu-offload-gb above what the decoder layers hold: the error names the flag and the most it may be,
and that most is a value the engine then accepts, also for a model whose layers hold a few MiB (the
figure was rounded to two decimals of a GiB: "hold 0.00 GiB ... offload at most 0 GiB (0: off)")."""

from __future__ import annotations

import re

import pytest

from model_optimizer import LLM

SMALL = dict(dtype="float32", kv_cache_memory=1 << 22)


def test_the_most_the_error_names_is_accepted_for_a_small_model(tiny_model):
    model = str(tiny_model("qwen3"))
    with pytest.raises(ValueError, match="cpu_offload_gb asks for 1 GiB") as error:
        LLM(model, cpu_offload_gb=1.0, **SMALL)
    held = float(re.search(r"decoder layers hold ([0-9.e+-]+) GiB", str(error.value)).group(1))
    most = float(re.search(r"offload at most ([0-9.e+-]+) GiB", str(error.value)).group(1))
    assert 0 < most <= held < 1
    llm = LLM(model, cpu_offload_gb=most, **SMALL)
    assert llm.runner.model.weight_offload.layer_ids  # offloading as much as it said works
