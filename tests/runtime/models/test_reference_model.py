"""The shipped reference model: our engine's greedy text equals transformers' on it (CPU)."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.assets import REFERENCE_MODEL_DIR

pytestmark = pytest.mark.skipif(
    not (REFERENCE_MODEL_DIR / "model.safetensors").is_file(), reason="reference model not installed"
)

PROMPTS = ["The Python language is", "def fibonacci(n):", "The json module", "Exceptions are raised when"]


def test_default_model_is_the_reference_model():
    llm = LLM(kv_cache_memory=1 << 24)
    assert llm.model_dir == REFERENCE_MODEL_DIR


@pytest.mark.slow
def test_greedy_text_equals_transformers():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(REFERENCE_MODEL_DIR))
    ref = AutoModelForCausalLM.from_pretrained(str(REFERENCE_MODEL_DIR), dtype=torch.float32).eval()
    llm = LLM(str(REFERENCE_MODEL_DIR), dtype="float32", kv_cache_memory=1 << 25)
    outputs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=32))
    for prompt, out in zip(PROMPTS, outputs):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        expected = ref.generate(ids, max_new_tokens=32, do_sample=False)[0, ids.shape[1] :].tolist()
        assert out.outputs[0].token_ids == expected
        assert out.outputs[0].text == tokenizer.decode(expected, skip_special_tokens=True)
    assert any(" the " in o.outputs[0].text for o in outputs)  # readable English, not noise
