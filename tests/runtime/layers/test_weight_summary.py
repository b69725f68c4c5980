"""The serve log's model line: a quantized model counts the parameters it stands for and names its format."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.layers.quantization.summary import summarize_weights
from model_optimizer.runtime.models.loader import load_model

CPU = torch.device("cpu")


def _hf_count(folder) -> int:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder)).num_parameters()  # tied weights once


@pytest.mark.parametrize("quantization", [None, "fp8", "int8", "rtn-int4"])
def test_count_is_the_float_models_whatever_the_format(tiny_model, quantization):
    folder = tiny_model("qwen3_hd64")  # tied embeddings; every linear's input a multiple of 64
    summary = summarize_weights(load_model(folder, "float32", CPU, quantization=quantization))
    assert summary.num_params == _hf_count(folder)
    assert summary.dtype == "float32"
    if quantization is None:
        assert summary.quantization is None and "weights in" not in summary.describe()
    else:
        assert summary.quantization == f"{quantization} (quantized at load)"
        assert f"{quantization} (quantized at load) weights in 8 linears" in summary.describe()
    assert f"{summary.num_params:,} parameters" in summary.describe()
