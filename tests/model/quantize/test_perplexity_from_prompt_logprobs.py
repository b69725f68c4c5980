"""`mopt quantize`'s perplexity equals the one a user computes through the engine's prompt_logprobs.

The quantize evaluation (model/quantize/evaluate.py) prefills each window through the runner's model
and needs whole-vocabulary distributions (KL, top-1 agreement), so it keeps its own forward; its
perplexity, though, must be exactly what serving the same model and scoring the same text with
prompt_logprobs gives: same loader, same kernels, same numbers.
"""

from __future__ import annotations

import math
import random

import pytest

from model_optimizer import SamplingParams
from model_optimizer.model.quantize.evaluate import compare, load_for_eval


def test_quantize_perplexity_equals_prompt_logprobs_perplexity(tiny_model):
    rng = random.Random(0)
    windows = [[rng.randrange(3, 1000) for _ in range(n)] for n in (40, 33, 57)]
    llm = load_for_eval(tiny_model("qwen3"), "cpu", "float32", max(map(len, windows)) + 1)  # + 1 generated token
    accuracy = compare(llm, llm, windows)
    outputs = llm.generate(windows, SamplingParams(prompt_logprobs=0, max_tokens=1, temperature=0))
    nll = count = 0
    for window, output in zip(windows, outputs):
        for entry, token_id in zip(output.prompt_logprobs[1:], window[1:]):
            nll -= entry[token_id].logprob
            count += 1
    assert count == accuracy.num_tokens
    assert math.exp(nll / count) == pytest.approx(accuracy.reference_perplexity, rel=1e-5)
    assert accuracy.perplexity == accuracy.reference_perplexity  # the same model on both sides
