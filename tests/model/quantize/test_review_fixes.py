"""`mopt quantize` on inputs a review found broken: a config.json without `architectures`, `--output .`,
`--eval-only` on our own AWQ folder, an act-order folder, and the folders transformers loads."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from model_optimizer.cli.main import main
from model_optimizer.model.quantize.calibration import read_documents

SMALL = ["--num-eval-samples", "2", "--eval-seq-len", "64", "--device", "cpu"]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.slow
def test_a_config_without_architectures_is_written_with_them(quant_model, tmp_path):
    """The loader takes the class from model_type; the writer re-read the raw config.json and failed with
    KeyError 'architectures' after all the work. vLLM picks the model class from the written list."""
    from model_optimizer.model.quantize.evaluate import load_for_eval
    from model_optimizer.runtime.layers.quantization.attach import quantized_layers

    src = _copy(quant_model("qwen3"), tmp_path / "src")
    config = json.loads((src / "config.json").read_text())
    del config["architectures"]
    (src / "config.json").write_text(json.dumps(config))
    out = tmp_path / "q"
    assert main(["quantize", str(src), "--method", "fp8", "--output", str(out), *SMALL]) == 0
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["Qwen3ForCausalLM"] and "text_of" not in written
    assert written["quantization_config"]["format"] == "float-quantized"
    llm = load_for_eval(out, "cpu", "float32", 32)
    assert {layer.quant_method.name for _, layer in quantized_layers(llm.runner.model)} == {"fp8"}


@pytest.mark.slow
def test_output_dot_fills_the_empty_current_folder(quant_model, tmp_path, monkeypatch, capsys):
    """`--output .` failed with "PosixPath('.') has an empty name" after tokenizing the text. The empty
    folder is filled in place: a shell inside it stays in a folder that exists."""
    out = tmp_path / "here"
    out.mkdir()
    monkeypatch.chdir(out)
    assert main(["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", ".", *SMALL]) == 0
    assert os.getcwd() == str(out) and os.path.samefile(".", out)
    assert {"config.json", "model.safetensors", "quantization_report.json"} <= {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["here"]  # no lock or staging folder left beside it
    assert json.loads((out / "quantization_report.json").read_text())["method"] == "int8"
    assert main(["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", ".", *SMALL]) == 2
    assert "already exists" in capsys.readouterr().err


def test_an_already_quantized_model_is_refused_before_the_text_is_read(quant_model, tmp_path, capsys):
    src = _copy(quant_model("qwen3"), tmp_path / "src")
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (src / "config.json").write_text(json.dumps(config))
    argv = ["quantize", str(src), "--method", "int8", "--output", str(tmp_path / "q"), "--eval-text", "missing.txt"]
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "is already quantized" in err and "missing.txt" not in err  # said before the evaluation text


@pytest.mark.slow
def test_eval_only_keeps_the_method_and_calibration_of_our_awq_folder(quant_model, tmp_path):
    """A compressed-tensors int4 layout does not say how it was made: --eval-only called our AWQ folder
    rtn-int4 and dropped its calibration record. Without a report of ours it claims neither."""
    calib = tmp_path / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"text": d}) for d in read_documents(None)[:3]) + "\n")
    model, out = str(quant_model("qwen2")), tmp_path / "awq"
    awq = ["--method", "awq", "--calib", str(calib), "--num-calib-samples", "2", "--calib-seq-len", "64"]
    assert main(["quantize", model, *awq, "--output", str(out), *SMALL]) == 0
    made = json.loads((out / "quantization_report.json").read_text())
    assert made["method"] == "awq" and made["calibration"]["num_samples"] == 2
    assert main(["quantize", "--eval-only", str(out), "--reference", model, *SMALL]) == 0
    again = json.loads((out / "quantization_report.json").read_text())
    assert again["method"] == "awq" and again["calibration"] == made["calibration"] and again["group_size"] == 128

    (out / "quantization_report.json").unlink()  # as another tool's folder
    assert main(["quantize", "--eval-only", str(out), "--reference", model, *SMALL]) == 0
    neutral = json.loads((out / "quantization_report.json").read_text())
    assert neutral["method"] == "int4 (compressed-tensors)" and neutral["group_size"] == 128
    assert neutral["calibration"] is None


@pytest.mark.slow
def test_eval_only_refuses_act_order_groups(quant_model, tmp_path, capsys):
    model, out = str(quant_model("qwen3")), tmp_path / "q"
    assert main(["quantize", model, "--method", "rtn-int4", "--group-size", "32", "--output", str(out), *SMALL]) == 0
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    (out / "config.json").write_text(json.dumps(config))
    before = (out / "quantization_report.json").read_text()
    assert main(["quantize", "--eval-only", str(out), "--reference", model, *SMALL]) == 2
    assert "act-order" in capsys.readouterr().err
    assert (out / "quantization_report.json").read_text() == before


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_transformers_loads_the_folders(quant_model, tmp_path):
    """fp8, int8 and int8-w8a8 load with plain from_pretrained; int4 needs CompressedTensorsConfig(run_compressed=False)
    (compressed-tensors packs the zero points, which transformers' compressed int4 model does not expect)
    and then gives our engine's logits. fp8 as compressed-tensors runs it (activations quantized per token,
    as the scheme says) gives our CPU engine's logits too: ours round the activations as it does."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from model_optimizer.model.quantize.evaluate import load_for_eval
    from model_optimizer.model.quantize.forward import window_logits

    model = str(quant_model("qwen3"))
    window = list(range(5, 37))
    folders = {}
    for method in ("fp8", "int8", "int8-w8a8", "rtn-int4"):
        folders[method] = tmp_path / method
        assert main(["quantize", model, "--method", method, "--output", str(folders[method]), *SMALL]) == 0
    for method in ("fp8", "int8", "int8-w8a8"):
        hf = AutoModelForCausalLM.from_pretrained(str(folders[method]), dtype=torch.float32)
        with torch.no_grad():
            logits = hf(torch.tensor([window])).logits[0].float()
        assert torch.isfinite(logits).all()
        if method == "fp8":
            llm = load_for_eval(folders[method], "cpu", "float32", len(window))
            ours = window_logits(llm.runner.model, window, llm.runner.device)
            torch.testing.assert_close(ours, logits, atol=2e-3, rtol=1e-3)
    hf = AutoModelForCausalLM.from_pretrained(
        str(folders["rtn-int4"]),
        dtype=torch.float32,
        quantization_config=CompressedTensorsConfig(run_compressed=False),
    )
    with torch.no_grad():
        theirs = hf(torch.tensor([window])).logits[0].float()
    llm = load_for_eval(folders["rtn-int4"], "cpu", "float32", len(window))
    ours = window_logits(llm.runner.model, window, llm.runner.device)
    torch.testing.assert_close(ours, theirs, atol=2e-3, rtol=1e-3)
