"""AWQ on a checkpoint loaded as stored: a bf16 model is searched layer by layer in float32, one layer at a
time, and its adjusted weights are the float32 load's rounded to bf16."""

from __future__ import annotations

import json
import random
import shutil

import torch
from safetensors.torch import load_file, save_file

from model_optimizer.cli.main import main
from model_optimizer.model.quantize.awq import apply_awq
from model_optimizer.model.quantize.job import exact_load_dtype
from model_optimizer.runtime.models.loader import load_model

CPU = torch.device("cpu")


def _bf16_copy(quant_model, tmp_path):
    src = shutil.copytree(quant_model("qwen2"), tmp_path / "bf16")
    weights = {k: v.to(torch.bfloat16) for k, v in load_file(str(src / "model.safetensors")).items()}
    save_file(weights, str(src / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(config | {"torch_dtype": "bfloat16"}))
    return src


def _layer_dtypes(model) -> list[set[torch.dtype]]:
    return [
        {t.dtype for t in (*layer.parameters(), *layer.buffers()) if t.is_floating_point()}
        for layer in model.model.layers
    ]


def test_a_bf16_model_holds_one_layer_in_float32_and_searches_as_a_float32_load(quant_model, tmp_path):
    src = _bf16_copy(quant_model, tmp_path)
    assert exact_load_dtype(src) == "bfloat16"
    rng = random.Random(0)
    windows = [[rng.randrange(3, 200) for _ in range(64)] for _ in range(4)]
    wide, narrow = load_model(src, "float32", CPU), load_model(src, "bfloat16", CPU)
    buffers = {n: b.dtype for n, b in narrow.named_buffers()}
    during, after = [], []
    for layer in narrow.model.layers:  # each layer runs twice: once to capture its inputs, once for its output
        layer.register_forward_pre_hook(lambda module, args: during.append(_layer_dtypes(narrow)))
    apply_awq(wide, windows, 128, torch.bfloat16)
    apply_awq(narrow, windows, 128, torch.bfloat16, on_layer=lambda i: after.append(_layer_dtypes(narrow)))

    plain = {torch.bfloat16, torch.float32}  # a bf16 layer, whose rotary tables stay float32
    n = len(narrow.model.layers)
    assert len(during) == 2 * n and len(after) == n
    for index, dtypes in enumerate(during):
        searched = index // 2
        assert dtypes[searched] == {torch.float32}
        assert all(d == plain for i, d in enumerate(dtypes) if i != searched)
    assert all(d == plain for dtypes in after for d in dtypes)  # each layer cast back before the next
    assert {n: b.dtype for n, b in narrow.named_buffers()} == buffers
    wide_params = dict(wide.named_parameters())
    for name, param in narrow.named_parameters():  # the same search, the scaled weights rounded once
        assert param.dtype == torch.bfloat16 and torch.equal(param, wide_params[name].to(torch.bfloat16)), name
    assert not torch.equal(
        narrow.model.layers[0].input_layernorm.weight,
        load_model(src, "bfloat16", CPU).model.layers[0].input_layernorm.weight,
    )


def test_mopt_quantize_awq_reads_a_bf16_checkpoint_and_writes_bf16(quant_model, tmp_path):
    src, out = _bf16_copy(quant_model, tmp_path), tmp_path / "awq"
    args = ["--method", "awq", "--num-calib-samples", "2", "--calib-seq-len", "64", "--num-eval-samples", "2"]
    assert main(["quantize", str(src), *args, "--eval-seq-len", "64", "--device", "cpu", "--output", str(out)]) == 0
    written = load_file(str(out / "model.safetensors"))
    floats = {v.dtype for k, v in written.items() if v.is_floating_point()}
    assert floats == {torch.bfloat16}
    assert json.loads((out / "quantization_report.json").read_text())["gate"]["passed"]
