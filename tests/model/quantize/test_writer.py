"""The compressed-tensors folder `mopt quantize` writes, checked by the compressed-tensors package itself."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from model_optimizer.model.quantize.writer import save_compressed_tensors
from model_optimizer.runtime.layers.quantization.attach import quantized_layers
from model_optimizer.runtime.models.loader import load_model
from tests.runtime.layers.quantization.shards import dequantized_shards

CPU = torch.device("cpu")


@pytest.mark.parametrize("method", ["rtn-int4", "int8", "fp8", "int8-w8a8"])
def test_compressed_tensors_decompresses_what_we_write(quant_model, tmp_path, method):
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    src = quant_model("qwen2")
    model = load_model(src, "float32", CPU, quantization=method)
    save_compressed_tensors(model, method, 128, src, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    qconfig = QuantizationConfig.model_validate(config)  # the library accepts our config block
    scheme = qconfig.config_groups["group_0"]
    inputs = scheme.input_activations  # what the runtime quantizes: fp8 and int8-w8a8 per token, at run time
    if method in ("fp8", "int8-w8a8"):
        assert (
            inputs.strategy == "token"
            and inputs.dynamic
            and inputs.type == ("int" if method == "int8-w8a8" else "float")
        )
    else:
        assert inputs is None
    assert qconfig.format == {"int8-w8a8": "int-quantized", "fp8": "float-quantized"}.get(method, "pack-quantized")
    compressor = BaseCompressor.get_value_from_registry(qconfig.format)
    state = load_file(str(tmp_path / "out" / "model.safetensors"))
    ours = dequantized_shards(model)
    for name, w in ours.items():
        module_state = {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")}
        theirs = compressor.decompress(module_state, scheme)["weight"]
        assert torch.equal(theirs.float(), w), name
    # and our engine reads the folder back to the same weights
    again = load_model(tmp_path / "out", "float32", CPU)
    assert {layer.quant_method.name for _, layer in quantized_layers(again)} == {method}
    reloaded = dequantized_shards(again)
    assert all(torch.equal(reloaded[n], w) for n, w in ours.items())
