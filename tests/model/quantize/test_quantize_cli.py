"""`mopt quantize` end to end on a tiny checkpoint: folder, report, gate, atomic output, --eval-only."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer.cli.main import main
from model_optimizer.model.quantize import awq
from model_optimizer.model.quantize.calibration import (
    MIN_CALIB_TOKENS,
    MIN_EVAL_TOKENS,
    read_documents,
    token_windows,
    too_little_text,
)
from model_optimizer.runtime.layers.quantization.quantizers import fake_quantize_int4

SMALL = ["--num-eval-samples", "2", "--eval-seq-len", "64", "--device", "cpu"]


def _leftovers(parent):
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name]


def test_quantize_writes_folder_and_report_that_the_engine_serves(quant_model, tmp_path, capsys):
    import os
    import stat

    out = tmp_path / "q"
    saved = os.umask(0o022)
    try:
        assert main(["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(out), *SMALL]) == 0
    finally:
        os.umask(saved)
    captured = capsys.readouterr()  # no terminal here: plain lines, a verdict, the size and the next step
    assert "mopt quantize: evaluation 2/2 (" in captured.err and "\x1b[" not in captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("PASS int8: perplexity ") and "top-1 agreement" in lines[0]
    assert lines[1].startswith(f"wrote {out}: ") and "of the original" in lines[1]
    assert lines[2] == f"next: mopt serve {out}" and "{" not in captured.out
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.iterdir()]}
    assert modes.pop("q") == 0o755 and set(modes.values()) == {0o644}, modes  # readable by a server's own uid
    report = json.loads((out / "quantization_report.json").read_text())
    acc = report["accuracy"]
    assert report["method"] == "int8" and report["format"] == "compressed-tensors"
    assert acc["num_tokens"] == 2 * 63 and 0 <= acc["top1_agreement"] <= 1 and acc["mean_kl"] >= 0
    assert report["gate"]["passed"] and _leftovers(tmp_path) == []
    assert main(["inspect", str(out)]) == 0  # inspect reads what quantize writes as the loader does
    from model_optimizer import LLM, SamplingParams

    llm = LLM(str(out), kv_cache_memory=1 << 22)
    assert len(llm.generate(["def f():"], SamplingParams(max_tokens=3, ignore_eos=True))[0].outputs[0].token_ids) == 3


def test_int8_w8a8_folder_declares_dynamic_int8_activations(quant_model, tmp_path, capsys):
    """--method int8-w8a8 writes llm-compressor's W8A8 scheme (int-quantized weights, int8 activations per
    token at run time), which our loader and `--eval-only` read back as int8-w8a8."""
    out = tmp_path / "w8a8"
    assert main(["quantize", str(quant_model("qwen3")), "--method", "int8-w8a8", "--output", str(out), *SMALL]) == 0
    assert capsys.readouterr().out.startswith("PASS int8-w8a8: ")
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    inputs = config["config_groups"]["group_0"]["input_activations"]
    assert config["format"] == "int-quantized" and inputs["type"] == "int" and inputs["strategy"] == "token"
    assert json.loads((out / "quantization_report.json").read_text())["method"] == "int8-w8a8"
    assert main(["quantize", "--eval-only", str(out), "--reference", str(quant_model("qwen3")), *SMALL]) == 0


def test_broken_limit_exits_non_zero_and_writes_nothing(quant_model, tmp_path, capsys):
    out = tmp_path / "q"
    code = main(
        [
            "quantize",
            str(quant_model("qwen3")),
            "--method",
            "rtn-int4",
            "--output",
            str(out),
            "--min-top1",
            "1.0",
            *SMALL,
        ]
    )
    assert code == 3
    assert not out.exists() and _leftovers(tmp_path) == []
    captured = capsys.readouterr()
    assert "top-1 agreement" in captured.err and "no folder was written" in captured.err
    assert captured.out.startswith("FAIL rtn-int4: ") and "(limits: --min-top1 1.0)" in captured.out


def test_failure_midway_leaves_no_folder(quant_model, tmp_path, monkeypatch):
    import model_optimizer.model.quantize.pipeline as pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "evaluate", interrupted)  # weights written, evaluation not yet done
    out = tmp_path / "q"
    assert main(["quantize", str(quant_model("qwen3")), "--method", "fp8", "--output", str(out), *SMALL]) == 130
    assert not out.exists() and _leftovers(tmp_path) == []


def test_existing_output_and_bad_flags_are_errors(quant_model, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    model = str(quant_model("qwen3"))
    assert main(["quantize", model, "--method", "fp8", "--output", str(tmp_path / "full")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    assert main(["quantize", model, "--method", "fp8"]) == 2
    assert main(["quantize", "--eval-only", str(tmp_path / "full")]) == 2
    assert "--reference" in capsys.readouterr().err


def test_eval_only_reevaluates_a_folder(quant_model, tmp_path):
    out = tmp_path / "q"
    model = str(quant_model("qwen3"))
    assert main(["quantize", model, "--method", "rtn-int4", "--output", str(out), *SMALL]) == 0
    (out / "quantization_report.json").unlink()
    assert main(["quantize", "--eval-only", str(out), "--reference", model, *SMALL]) == 0
    report = json.loads((out / "quantization_report.json").read_text())
    # without our report the compressed-tensors int4 layout does not say rtn or awq (test_review_fixes.py)
    assert report["method"] == "int4 (compressed-tensors)" and report["accuracy"]["num_windows"] == 2
    assert main(["quantize", "--eval-only", str(out), "--reference", model, "--min-top1", "1", *SMALL]) == 3


def test_awq_end_to_end_records_calibration(quant_model, tmp_path, capsys):
    calib = tmp_path / "calib.jsonl"
    calib.write_text("\n".join(json.dumps({"text": d}) for d in read_documents(None)[:3]) + "\n")
    out = tmp_path / "awq"
    args = [
        "quantize",
        str(quant_model("qwen2")),
        "--method",
        "awq",
        "--output",
        str(out),
        "--calib",
        str(calib),
        "--num-calib-samples",
        "4",
        "--calib-seq-len",
        "64",
        *SMALL,
    ]
    assert main(args) == 0
    report = json.loads((out / "quantization_report.json").read_text())
    assert report["calibration"]["num_samples"] == 4 and report["calibration"]["num_tokens"] == 256
    err = capsys.readouterr().err  # the long phase reports each layer as it finishes, not all at the end
    assert "mopt quantize: AWQ search: 2 steps" in err
    assert err.index("AWQ search 1/2 (") < err.index("AWQ search 2/2 (") < err.index("evaluation 2/2 (")


def test_too_little_calibration_and_evaluation_text_is_warned_about(quant_model, tmp_path, capsys):
    """AWQ on a one-document --calib and an --eval-text of 3 tokens passed without a word: scales fit to one
    passage and figures over 2 scored tokens. Each is now named in a warning with the amount recommended."""
    calib = tmp_path / "calib.jsonl"
    calib.write_text(json.dumps({"text": read_documents(None)[0][:400]}) + "\n")
    held_out = tmp_path / "eval.txt"
    held_out.write_text("def f")
    out = tmp_path / "awq"
    argv = ["quantize", str(quant_model("qwen2")), "--method", "awq", "--output", str(out)]
    argv += ["--calib", str(calib), "--eval-text", str(held_out), "--device", "cpu"]
    assert main(argv) == 0
    report = json.loads((out / "quantization_report.json").read_text())
    num_calib, num_eval = report["calibration"]["num_tokens"], report["evaluation"]["num_tokens"]
    assert 0 < num_calib < MIN_CALIB_TOKENS and num_eval == 3
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"mopt quantize: warning: the evaluation text (--eval-text) is only {num_eval} tokens, too few for the "
        f"accuracy figures to be meaningful: {MIN_EVAL_TOKENS:,} or more are recommended (give a longer "
        "--eval-text file)",
        f"mopt quantize: warning: the calibration text (--calib) is only {num_calib} tokens, too few for AWQ's "
        f"scales to be meaningful: {MIN_CALIB_TOKENS:,} or more are recommended (give a longer --calib file)",
    ]


def test_enough_text_is_not_warned_about_and_too_few_windows_are_named():
    enough = [[1] * 512] * (MIN_EVAL_TOKENS // 512)
    assert too_little_text("evaluation", enough, num_samples=32, seq_len=512) is None
    few = too_little_text("calibration", [[1] * 64] * 4, num_samples=4, seq_len=64)
    assert few is not None and few.startswith("--num-calib-samples 4 x --calib-seq-len 64 take only 256 ")
    assert few.endswith("(raise --num-calib-samples or --calib-seq-len)")


def test_awq_scales_beat_round_to_nearest_on_outlier_channels():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 256, generator=gen)
    x[:, :4] *= 30  # a few salient input channels, as in real activations
    w = torch.randn(64, 256, generator=gen)

    def loss(s):
        return ((x @ (fake_quantize_int4(w * s, 128) / s).T - x @ w.T) ** 2).mean().item()

    s = awq.search_scales(x, w, 128, torch.float32)
    assert loss(s) < 0.9 * loss(torch.ones(256))


def test_clip_search_never_hurts_a_group():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(512, 128, generator=gen), torch.randn(16, 128, generator=gen)
    w[0, 0] = 8.0  # one outlier weight that stretches its group's range
    clipped = awq.search_clip(x, w, 128, torch.float32)
    err = lambda v: ((x @ fake_quantize_int4(v, 128).T - x @ w.T) ** 2).mean(0)  # noqa: E731
    assert torch.all(err(clipped) <= err(w) + 1e-6)


def test_calibration_files_are_checked(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        read_documents(bad)
    with pytest.raises(ValueError, match="does not exist"):
        read_documents(tmp_path / "missing.txt")

    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(range(len(text)))}

    windows = token_windows(Tok(), ["a" * 10, "b" * 10], num_samples=3, seq_len=8)
    assert [len(w) for w in windows] == [8, 8, 4]
    from model_optimizer.model.quantize.calibration import CALIBRATION_MODULES, DATA_DIR, EVALUATION_MODULES

    assert not set(CALIBRATION_MODULES) & set(EVALUATION_MODULES)
    calib_text = (DATA_DIR / "calibration.txt").read_text()
    assert not any(d.strip() in calib_text for d in read_documents(None, "evaluation") if len(d) > 200)


def test_a_checkpoint_without_a_dtype_keeps_its_weights_dtype(quant_model, tmp_path):
    """config.json without torch_dtype (or dtype) read as float32: a bf16 checkpoint's embedding and norms
    were written in float32 and the "quantized" folder came out larger than the original. The dtype is
    now the one most linear weights have in the headers, as `mopt inspect --fix` picks it."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    src = shutil.copytree(quant_model("qwen3"), tmp_path / "bf16")
    weights = {k: v.to(torch.bfloat16) for k, v in load_file(str(src / "model.safetensors")).items()}
    save_file(weights, str(src / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in ("torch_dtype", "dtype")}))
    out = tmp_path / "q"
    assert main(["quantize", str(src), "--method", "int8", "--output", str(out), *SMALL]) == 0
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        floats = {
            f.get_slice(k).get_dtype()
            for k in f.keys()
            if not k.endswith(("weight_packed", "weight_scale", "weight_shape"))
        }
    assert floats == {"BF16"}  # embedding and norms as they were
    assert (out / "model.safetensors").stat().st_size < (src / "model.safetensors").stat().st_size


def test_a_bf16_checkpoint_is_loaded_as_stored_and_rounds_as_from_float32(quant_model, tmp_path):
    """Non-AWQ methods load the source in the dtype it stores (half a float32 load's memory); the quantizers
    compute in float32, so the folder written from a bf16 checkpoint is tensor for tensor the one written from
    the same values stored in float32 (loaded in float32)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from model_optimizer.model.quantize.job import exact_load_dtype

    wide = shutil.copytree(quant_model("qwen3"), tmp_path / "fp32")
    weights = {k: v.to(torch.bfloat16) for k, v in load_file(str(wide / "model.safetensors")).items()}
    save_file({k: v.float() for k, v in weights.items()}, str(wide / "model.safetensors"), metadata={"format": "pt"})
    narrow = shutil.copytree(wide, tmp_path / "bf16")
    save_file(weights, str(narrow / "model.safetensors"), metadata={"format": "pt"})
    for folder in (wide, narrow):  # both are a bf16 model: the folders keep bf16 where they do not quantize
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(config | {"torch_dtype": "bfloat16"}))
    assert (exact_load_dtype(wide), exact_load_dtype(narrow)) == ("float32", "bfloat16")
    for method in ("int8", "fp8", "rtn-int4", "int8-w8a8"):
        outs = [tmp_path / f"{method}-{folder.name}" for folder in (wide, narrow)]
        for folder, out in zip((wide, narrow), outs, strict=True):
            assert main(["quantize", str(folder), "--method", method, "--output", str(out), *SMALL]) == 0
        a, b = (load_file(str(out / "model.safetensors")) for out in outs)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), method
    weights["model.norm.weight"] = weights["model.norm.weight"].half()  # two float dtypes: float32 holds both
    save_file(weights, str(narrow / "model.safetensors"), metadata={"format": "pt"})
    assert exact_load_dtype(narrow) == "float32"
