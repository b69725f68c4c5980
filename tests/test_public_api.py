"""The package's top level names what vLLM's does, so code written for vLLM changes only its import line."""

from __future__ import annotations

import subprocess
import sys

import pytest

import model_optimizer
from model_optimizer.runtime.engine import outputs
from model_optimizer.runtime.llm import LLM


def test_every_public_name_is_the_class_the_engine_uses():
    assert model_optimizer.LLM is LLM
    assert model_optimizer.RequestOutput is outputs.RequestOutput
    assert model_optimizer.CompletionOutput is outputs.CompletionOutput
    assert model_optimizer.EmbeddingRequestOutput is outputs.EmbeddingRequestOutput
    assert model_optimizer.ScoringRequestOutput is outputs.ScoringRequestOutput
    for name in model_optimizer.__all__:
        assert getattr(model_optimizer, name) is not None


def test_prompt_dicts_are_the_dicts_generate_takes():
    tokens = model_optimizer.TokensPrompt(prompt_token_ids=[1, 2, 3], prompt="abc")
    text = model_optimizer.TextPrompt(prompt="abc")
    assert tokens == {"prompt_token_ids": [1, 2, 3], "prompt": "abc"} and text == {"prompt": "abc"}


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'LLMEngineX'"):
        _ = model_optimizer.LLMEngineX


def test_importing_the_package_imports_no_torch():
    code = "import sys, model_optimizer; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
