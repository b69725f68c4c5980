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
    "extra",
    [
        ["--method", "int8"],
        ["--output", "OUT"],
        ["MODEL"],
        ["MODEL", "--method", "fp8", "--output", "OUT"],
        ["--group-size", "64"],
        ["--num-calib-samples", "4"],
        ["--calib-seq-len", "64"],
    ],
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


def test_an_eval_text_that_is_not_utf8_is_named(quant_model, tmp_path, capsys):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"text \x97\xff more")
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    line = error_line([*argv, "--eval-text", str(binary), *SMALL], capsys)
    assert f"evaluation file {binary} is not UTF-8 text (bad byte at offset 5)" in line


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


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from tests.tiny_checkpoints import build_encoder

    return build_encoder(tmp_path_factory.mktemp("encoder") / "bert", hidden_size=64, intermediate_size=128)


@pytest.mark.parametrize(
    ("model", "flags", "message"),
    [
        ("qwen3", ["--method", "int8", "--min-cosine", "0.5"], "--min-cosine gates embedding models"),
        ("bert", ["--method", "int8", "--max-ppl-increase", "0.01"], "--max-ppl-increase gates generation models"),
        ("bert", ["--method", "int8", "--min-top1", "0.9"], "--min-top1 gates generation models"),
        ("qwen3", ["--method", "int8", "--group-size", "64"], "--group-size is the int4 group size of --method awq"),
        ("qwen3", ["--method", "fp8", "--num-calib-samples", "5"], "--num-calib-samples is a calibration setting"),
        ("qwen3", ["--method", "rtn-int4", "--calib-seq-len", "7"], "--calib-seq-len is a calibration setting"),
        ("qwen3", ["--method", "int8", "--reference", "MODEL"], "--reference is the original folder of --eval-only"),
    ],
)
def test_a_flag_that_does_not_apply_is_refused(quant_model, encoder, tmp_path, capsys, model, flags, message):
    """They were silently ignored: a gate the user set was dropped while the verdict said PASS."""
    folder = str(encoder if model == "bert" else quant_model(model))
    out = tmp_path / "q"
    flags = [folder if f == "MODEL" else f for f in flags]
    assert message in error_line(["quantize", folder, "--output", str(out), *flags, *SMALL], capsys)
    assert not out.exists()


def _quantized(quant_model, tmp_path) -> tuple[str, object]:
    model = str(quant_model("qwen3"))
    out = tmp_path / "q"
    assert main(["quantize", model, "--method", "int8", "--output", str(out), *SMALL]) == 0
    return model, out


def test_eval_only_refuses_a_reference_that_is_not_the_original(quant_model, tmp_path, capsys):
    """An unrelated reference PASSed with a 0.1% top-1 agreement and its name replaced the folder's report."""
    import json

    model, out = _quantized(quant_model, tmp_path)
    report = (out / "quantization_report.json").read_bytes()
    other_vocab = shutil.copytree(model, tmp_path / "other_vocab")
    config = json.loads((other_vocab / "config.json").read_text())
    (other_vocab / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 64}))
    argv = ["quantize", "--eval-only", str(out), *SMALL, "--reference"]
    line = error_line([*argv, str(quant_model("qwen2"))], capsys)
    assert f"is not the original of {out}: their config.json differ in architectures ['Qwen3ForCausalLM'] vs" in line
    line = error_line([*argv, str(other_vocab)], capsys)
    assert f"differ in vocab_size {config['vocab_size']} vs {config['vocab_size'] + 64}" in line
    assert "is itself quantized; give the original float folder" in error_line([*argv, str(out)], capsys)
    assert (out / "quantization_report.json").read_bytes() == report
    assert main([*argv, model]) == 0  # the true original still scores it


def test_a_group_size_that_does_not_tile_is_refused_before_any_work(quant_model, encoder, tmp_path, capsys):
    argv = ["quantize", str(quant_model("qwen3")), "--method", "awq", "--output", str(tmp_path / "q"), *SMALL]
    assert main([*argv, "--group-size", "7"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "mopt quantize: error: --group-size 7: model.layers.0.self_attn.qkv_proj: int4 groups of 7 inputs do not "
        "tile in_features 128: the group size must be a multiple of 8 that divides every layer's input size "
        "(128 is the standard)"
    )
    assert "AWQ search" not in err and "rounding" not in err  # refused before the calibration and the rounding
    argv = ["quantize", str(encoder), "--method", "rtn-int4", "--output", str(tmp_path / "q"), *SMALL]
    assert "--group-size 24: encoder.layer.0.attention.qkv_proj: int4 groups of 24" in error_line(
        [*argv, "--group-size", "24"], capsys
    )
    assert list(tmp_path.iterdir()) == []


def test_an_eval_seq_len_beyond_the_model_is_refused_before_any_work(quant_model, tmp_path, capsys):
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    assert main([*argv, "--eval-seq-len", "99999999", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            f"error: --eval-seq-len 99999999 exceeds the 512 tokens {quant_model('qwen3')} takes (max_position_embeddings)"
        )
    )
    assert "rounding" not in err and list(tmp_path.iterdir()) == []


def test_the_default_eval_seq_len_is_cut_to_a_shorter_model(quant_model, tmp_path):
    """A model of 128 positions: the default windows of 512 tokens failed after the rounding."""
    import json

    model = shutil.copytree(quant_model("qwen3"), tmp_path / "short")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    out = tmp_path / "q"
    assert main(["quantize", str(model), "--method", "int8", "--output", str(out), "--num-eval-samples", "2"]) == 0
    report = json.loads((out / "quantization_report.json").read_text())
    assert report["evaluation"]["num_tokens"] == 2 * 128 and report["accuracy"]["num_tokens"] == 2 * 127


def test_an_output_that_appears_while_quantizing_loses_neither_result(quant_model, tmp_path):
    """Two runs on one --output: the second to finish failed with a raw '[Errno 39] Directory not empty'
    and its result was deleted. Here the 'other run' fills the output as the evaluation starts."""
    from model_optimizer.model.quantize.job import Progress, QuantizeOptions
    from model_optimizer.model.quantize.pipeline import quantize

    out = tmp_path / "q"

    def other_run(task: str, total: int) -> None:
        if task == "evaluation":
            out.mkdir()
            (out / "config.json").write_text("the other run's")

    opts = QuantizeOptions(quant_model("qwen3"), "int8", out, num_eval_samples=2, eval_seq_len=32, device="cpu")
    with pytest.raises(ValueError, match=r"--output .*/q appeared while quantizing \(another run\?\)") as caught:
        quantize(opts, Progress(start=other_run))
    assert (out / "config.json").read_text() == "the other run's" and len(list(out.iterdir())) == 1
    [kept] = [p for p in tmp_path.iterdir() if p != out]
    assert str(caught.value).endswith(f"this run's result is in {kept}") and kept.name.startswith("q.kept-")
    assert (kept / "quantization_report.json").is_file() and (kept / "model.safetensors").is_file()


def test_a_second_run_on_one_output_is_refused_before_its_work(quant_model, tmp_path, capsys):
    """It did all the work, then failed with '[Errno 39] Directory not empty'. The first run's lock is
    held here as a running `mopt quantize` holds it."""
    from model_optimizer.model.quantize.job import output_lock

    out = tmp_path / "q"
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(out), *SMALL]
    with output_lock(out):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1] == (
            f"mopt quantize: error: --output {out} is being written by another mopt quantize run (it holds "
            ".q.lock); wait for it to finish, or give another --output"
        )
        assert "rounding" not in err and not out.exists()
    assert main(argv) == 0 and [p.name for p in tmp_path.iterdir()] == ["q"]  # the lock file is gone with it


def test_an_empty_eval_text_is_named_as_the_evaluation_text(quant_model, tmp_path, capsys):
    """An --eval-text whose one record is empty was reported as 'the calibration text tokenizes to fewer
    than 2 tokens' under --method int8, which has no calibration text."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n')
    argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q")]
    line = error_line([*argv, "--eval-text", str(empty), *SMALL], capsys)
    assert "the evaluation text (--eval-text) tokenizes to fewer than 2 tokens" in line
    assert not (tmp_path / "q").exists()
