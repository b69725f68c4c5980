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
    captured = capsys.readouterr()
    assert "max abs diff" in captured.out
    assert "mopt export-onnx: exporting and checking with onnxruntime" in captured.err  # no terminal: a line
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


def test_the_saved_tokenizer_feeds_the_graph_as_it_is_and_cuts_where_the_engine_does(minilm_dir, minilm, tmp_path):
    """The tokenizer beside model.onnx gave token_type_ids, which onnxruntime refuses as an unknown input,
    and cut at its own 512 tokens where the engine and sentence-transformers cut MiniLM at 256: a long
    text's vector came out different (by 0.06) with no error."""
    from transformers import AutoTokenizer

    from model_optimizer.model.export.onnx import export_folder

    export_folder(minilm, tmp_path / "onnx", check_texts=["a", "two texts"])
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "onnx"))
    texts = ["a short one", "hello world " * 300, "naïve café"]
    enc = tok(texts, padding=True, truncation=True, return_tensors="np")
    assert sorted(enc) == ["attention_mask", "input_ids"] and enc["input_ids"].shape[1] == minilm.max_seq_length
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, dict(enc))[0]
    expected = minilm.encode(texts, truncate_prompt_tokens=-1).embeddings.numpy()
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


def _left_padding_copy(model_dir, folder):
    """A copy of `model_dir` whose tokenizer pads on the left, as Qwen3-Embedding's does."""
    import shutil

    model = shutil.copytree(model_dir, folder)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    return model


@pytest.mark.parametrize("which", ["qwen3", "minilm"])
def test_a_left_padding_tokenizer_s_batches_give_the_vectors_of_single_texts(
    which, qwen3_dir, minilm_dir, tmp_path, capsys
):
    """The graph took positions as 0..seq-1 and the last token at the end of the row, so a batch padded
    on the left (the tokenizer saved beside it said so) gave the short text another vector: cosine 0.11
    for the decoder. Positions and the pooled token now come from the mask, and the tokenizer is kept as
    shipped."""
    from transformers import AutoTokenizer

    model = _left_padding_copy(qwen3_dir if which == "qwen3" else minilm_dir, tmp_path / "model")
    out = tmp_path / "onnx"
    assert main(["export-onnx", "--model", str(model), "--output", str(out)]) == 0
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.padding_side == "left"
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    end = "<|im_end|>" if which == "qwen3" else ""  # the end token the decoder embedder reads

    def run(texts):
        enc = tok(texts, padding=True, return_tensors="np")
        feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
        return session.run(["sentence_embedding"], feeds)[0]

    texts = [f"hi{end}", f"a much longer text with many more tokens in it than the first{end}", f"mid length{end}"]
    batched = run(texts)
    single = np.concatenate([run([t]) for t in texts])
    assert (enc := tok(texts, padding=True)["attention_mask"])[0][0] == 0, enc  # the batch is left-padded
    assert np.abs(batched - single).max() < 1e-4


@pytest.mark.parametrize("pooling", ["cls", "last", "max", "mean_sqrt_len"])
def test_every_pooling_is_right_for_either_padding_side(pooling, qwen3_dir, tmp_path):
    """The export's own check runs left- and right-padded batches, and so does this test, per pooling:
    `cls` must take the first real token and `last` the last one, wherever the padding is."""
    from model_optimizer.model.export.onnx import export_folder, padded_batch
    from model_optimizer.runtime.embed import Embedder

    embedder = Embedder(qwen3_dir, device="cpu", dtype="float32", pooling=pooling)
    texts = ["short", "a longer text for the decoder embedder", "mid length text", "x"]
    report = export_folder(embedder, tmp_path / "q", check_texts=texts)
    assert report.max_abs_diff < 1e-4 and report.min_cosine > 0.99999
    session = ort.InferenceSession(str(tmp_path / "q" / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = embedder.encode(texts).embeddings.numpy()
    for side in ("left", "right"):
        input_ids, mask = padded_batch(embedder, texts, side)
        got = session.run(["sentence_embedding"], {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()})[0]
        assert np.abs(got - expected).max() < 1e-4, side


def test_the_export_shows_no_tracer_warning(qwen3, tmp_path):
    """Every export printed torch's TracerWarning about the attention's head-count branch, which is
    fixed per model and so traced right: an alarm users could do nothing about."""
    import warnings

    import torch

    from model_optimizer.model.export.onnx import export_onnx

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_onnx(qwen3, tmp_path / "model.onnx")
    assert (tmp_path / "model.onnx").is_file()
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)], [str(w.message) for w in caught]
