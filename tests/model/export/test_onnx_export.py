"""ONNX export of MiniLM, run in onnxruntime and compared with the engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from model_optimizer.cli.main import main

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow  # each test exports and checks a model in onnxruntime


def test_export_onnx_cli_writes_a_checked_model(minilm_dir, minilm, tmp_path, capsys):
    out = tmp_path / "onnx"
    assert main(["export-onnx", "--model", str(minilm_dir), "--output", str(out)]) == 0
    assert "max abs diff" in capsys.readouterr().out
    report = json.loads((out / "export_report.json").read_text())
    assert report["max_abs_diff"] < 1e-4 and report["min_cosine"] > 0.99999

    # dynamic axes: a batch shape unlike the export example, run straight from the folder
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    texts = ["x", "three words here", "a much longer sentence " * 12, "emoji 😀", "?"]
    enc = tok(texts, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["sentence_embedding"], {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")})[0]
    expected = minilm.encode(texts).embeddings.numpy()
    assert got.shape == (5, 384)
    assert np.abs(got - expected).max() < 1e-4


def test_decoder_embedder_exports_with_causal_mask_and_last_token(qwen3_dir, qwen3, tmp_path):
    from model_optimizer.model.export.onnx import export_folder, padded_batch

    texts = ["short", "a longer text for the decoder embedder", "mid length text"]
    report = export_folder(qwen3, tmp_path / "q", check_texts=texts)
    assert report.max_abs_diff < 1e-4 and report.min_cosine > 0.99999
    session = ort.InferenceSession(str(tmp_path / "q" / "model.onnx"), providers=["CPUExecutionProvider"])
    more = texts + ["one more", "and the last of five"]
    input_ids, mask = padded_batch(qwen3, more)
    got = session.run(["sentence_embedding"], {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()})[0]
    assert np.abs(got - qwen3.encode(more).embeddings.numpy()).max() < 1e-4


def test_export_into_an_existing_folder_stages_inside_it_and_keeps_the_user_s_files(qwen3, tmp_path):
    """An existing --output (a mounted volume, say) is staged inside itself, so each file's rename stays
    on its file system; the user's files stay, the old report goes before the new files come in."""
    from model_optimizer.model.export.onnx import export_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "export_report.json").write_text('{"old": true}')
    report = export_folder(qwen3, out, check_texts=["short", "a longer text to embed"])
    names = sorted(p.name for p in out.iterdir())
    assert "model.onnx" in names and "notes.txt" in names and not [n for n in names if n.startswith(".")]
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "export_report.json").read_text())["onnx_path"] == str(out / "model.onnx")
    assert report.onnx_path == str(out / "model.onnx")
