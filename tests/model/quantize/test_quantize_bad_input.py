"""`mopt quantize` on bad input: one line `mopt quantize: error: ...` and exit code 2 before any work,
and a gate that a NaN model cannot pass."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer.cli.main import main
from tests.cli_errors import error_line

SMALL = ["--num-eval-samples", "2", "--eval-seq-len", "32", "--device", "cpu"]


def test_a_nan_model_fails_the_gate_and_writes_nothing(quant_model, tmp_path, capsys):
    """NaN compares False with every limit; `increase > limit` let it PASS (+nan%) and wrote the folder."""
    folder = shutil.copytree(quant_model("qwen3"), tmp_path / "nan")
    weights = load_file(str(folder / "model.safetensors"))
    weights = {k: torch.full_like(v, float("nan")) if "norm" in k else v for k, v in weights.items()}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "q"
    argv = ["quantize", str(folder), "--method", "int8", "--output", str(out), "--max-ppl-increase", "0.5", *SMALL]
    assert main(argv) == 3
    assert "refused: perplexity rose nan%" in capsys.readouterr().err
    assert not out.exists()


def test_a_ppl_limit_of_nan(quant_model, tmp_path, capsys):
    """--min-top1 and --min-cosine have ranges that refuse NaN; --max-ppl-increase nan passed every result."""
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    assert "--max-ppl-increase must be a number, got nan" in error_line([*argv, "--max-ppl-increase", "nan"], capsys)
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(
    "extra", [["--method", "int8"], ["--output", "OUT"], ["MODEL"], ["MODEL", "--method", "fp8", "--output", "OUT"]]
)
def test_eval_only_with_the_flags_of_a_quantization(quant_model, tmp_path, capsys, extra):
    """They were silently ignored: the user asked for a new folder and got an old one re-scored."""
    model = str(quant_model("qwen3"))
    extra = [model if a == "MODEL" else str(tmp_path / "out") if a == "OUT" else a for a in extra]
    argv = ["quantize", "--eval-only", str(tmp_path), "--reference", model, *extra, *SMALL]
    assert "--eval-only DIR cannot be combined with" in error_line(argv, capsys)
    assert not (tmp_path / "out").exists() and not (tmp_path / "quantization_report.json").exists()


def test_calib_without_awq_is_refused(quant_model, tmp_path, capsys):
    calib = tmp_path / "calib.txt"
    calib.write_text("some text\n")
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    assert "--calib is calibration text for --method awq" in error_line([*argv, "--calib", str(calib)], capsys)


def test_a_missing_eval_text_is_named_as_evaluation_text(quant_model, tmp_path, capsys):
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    line = error_line([*argv, "--eval-text", str(tmp_path / "nope.txt"), *SMALL], capsys)
    assert f"evaluation file {tmp_path / 'nope.txt'} does not exist" in line


def test_a_model_without_tokenizer_files(quant_model, tmp_path, capsys):
    """transformers made up an empty tokenizer: 'the calibration text tokenizes to fewer than 2 tokens'."""
    folder = shutil.copytree(
        quant_model("qwen3"), tmp_path / "m", ignore=shutil.ignore_patterns("tokenizer*", "chat_template*")
    )
    argv = ["quantize", str(folder), "--method", "int8", "--output", str(tmp_path / "q"), *SMALL]
    assert "has no tokenizer files" in error_line(argv, capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_awq_group_size_that_does_not_tile_a_layer(tiny_model, tmp_path, capsys):
    """hidden_size 64 and groups of 128: a RuntimeError from a reshape inside the AWQ search before."""
    argv = ["quantize", str(tiny_model("qwen3")), "--method", "awq", "--output", str(tmp_path / "q")]
    argv += ["--num-calib-samples", "2", "--calib-seq-len", "32", *SMALL]
    line = error_line(argv, capsys)
    assert "model.layers.0.self_attn.qkv_proj: int4 groups of 128 inputs do not tile in_features 64" in line
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_architecture_is_named_among_the_generation_models(quant_model, tmp_path, capsys):
    import json

    folder = shutil.copytree(quant_model("qwen3"), tmp_path / "foo")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"]}))
    line = error_line(["quantize", str(folder), "--method", "int8", "--output", str(tmp_path / "out"), *SMALL], capsys)
    assert "'FooForCausalLM' is not supported for generation" in line and "embeddings" not in line.split(";")[0]
