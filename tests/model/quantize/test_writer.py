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


CUSTOM_CONFIG = (
    "from transformers import Qwen3Config\n\n\nclass CustomQwen3Config(Qwen3Config):\n    model_type = 'qwen3'\n"
)
ORIGINAL_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def test_every_file_but_the_original_weights_is_carried_over(quant_model, tmp_path):
    """Only .json/.txt/.model/.jinja were copied: a trust_remote_code model lost the .py files its
    auto_map names (DeepSeek's configuration_deepseek.py) and a tiktoken tokenizer its vocabulary, so the
    folder did not load. Now every file is, as `mopt inspect --fix` carries them, but the original's
    weights in any format and what the writer writes itself."""
    import shutil

    src = shutil.copytree(quant_model("qwen3"), tmp_path / "src")
    config = json.loads((src / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_custom.CustomQwen3Config"}
    (src / "config.json").write_text(json.dumps(config))
    carried = {"configuration_custom.py": CUSTOM_CONFIG, "qwen.tiktoken": "IQ== 0\n", "LICENSE": "Apache-2.0\n"}
    for name, text in carried.items():
        (src / name).write_text(text)
    (src / "quantization_report.json").write_text("{}")  # a stale report of another run: never carried
    (src / "README.md").write_text("---\nbase_model: x\n---\nThe float model.\n")  # the original's card: not carried
    for name in ORIGINAL_WEIGHTS:
        (src / name).write_bytes(b"{}")
    model = load_model(src, "float32", CPU, quantization="int8")
    save_compressed_tensors(model, "int8", 128, src, tmp_path / "out")
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    assert {
        *carried,
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    } <= names
    assert all((out / name).read_text() == text for name, text in carried.items())
    assert not names & {*ORIGINAL_WEIGHTS, "quantization_report.json", "README.md"}
    assert json.loads((out / "config.json").read_text())["auto_map"] == config["auto_map"]
