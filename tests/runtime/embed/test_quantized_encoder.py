"""Serving what `mopt quantize` wrote for an encoder: `Embedder`, `mopt serve` and `mopt embed` on the
int8 compressed-tensors folder of the real all-MiniLM-L6-v2 (weights packed as `weight_packed`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest
import torch

from model_optimizer.cli.main import main

TEXTS = [
    "The cat sat on the mat.",
    "Packed batches of tokens run through one encoder pass.",
    "def add(a, b): return a + b",
    "naïve café déjà vu",
    "The river flows down to the sea after the spring rains.",
]


@pytest.fixture(scope="module")
def int8_dir(minilm_dir, tmp_path_factory) -> Path:
    """MiniLM quantized to int8 by `mopt quantize`, as a user would do before serving it."""
    out = tmp_path_factory.mktemp("quantized_encoder") / "minilm-int8"
    args = ["quantize", str(minilm_dir), "--method", "int8", "--output", str(out)]
    assert main([*args, "--num-eval-samples", "8", "--device", "cpu"]) == 0
    return out


@pytest.fixture(scope="module")
def quantized(int8_dir):
    from model_optimizer.runtime.embed import Embedder

    return Embedder(int8_dir, device="cpu")


def _cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1)


@pytest.mark.slow
def test_embedder_loads_the_folder_and_runs_int8_linears(quantized, minilm):
    from model_optimizer.runtime.layers.quantization.attach import quantized_layers
    from model_optimizer.runtime.layers.quantization.method import Int8Method

    layers = quantized_layers(quantized.backbone.model)
    assert len(layers) == 6 * 4  # per layer: fused qkv, attention output, intermediate, output
    assert all(isinstance(m.quant_method, Int8Method) and m.qweight.dtype == torch.int8 for _, m in layers)
    got, want = quantized.encode(TEXTS).embeddings, minilm.encode(TEXTS).embeddings
    cos = _cosines(got, want)
    assert cos.min() > 0.999, cos
    assert cos.min() < 1 - 1e-7  # the rounded weights, not the original ones


@pytest.mark.slow
def test_the_quantize_gate_and_the_engine_load_the_same_weights(int8_dir, quantized):
    from model_optimizer.model.quantize.embed_accuracy import load_quantized_backbone
    from model_optimizer.runtime.embed import Embedder

    gate = Embedder(int8_dir, backbone=load_quantized_backbone(int8_dir, "auto", "cpu"), device="cpu")
    assert torch.equal(gate.encode(TEXTS).embeddings, quantized.encode(TEXTS).embeddings)


@pytest.mark.slow
def test_dummy_weights_of_a_quantized_folder_are_rounded_as_the_engine_does(int8_dir):
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.layers.quantization.attach import quantized_layers

    dummy = Embedder(int8_dir, device="cpu", load_format="dummy")
    assert len(quantized_layers(dummy.backbone.model)) == 24
    assert torch.isfinite(dummy.encode(TEXTS[:2]).embeddings).all()


def test_gate_refuses_a_float_folder(minilm_dir):
    from model_optimizer.model.quantize.embed_accuracy import load_quantized_backbone

    with pytest.raises(ValueError, match="no quantization_config"):
        load_quantized_backbone(minilm_dir, "float32", "cpu")


def test_quantized_decoder_embedder_is_a_clear_error(qwen3_dir, tmp_path):
    from model_optimizer.runtime.embed import Embedder

    folder = tmp_path / "qwen3-q"
    shutil.copytree(qwen3_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
            }
        },
    }
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="quantized decoder embedders .* are not supported yet"):
        Embedder(folder, device="cpu")


@pytest.mark.slow
def test_served_by_mopt_serve_through_the_openai_client(int8_dir, quantized, minilm):
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.server.app import is_embedding_model, load_embedder
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    assert is_embedding_model(int8_dir)  # so `mopt serve` loads it as an Embedder
    embedder = load_embedder(EngineConfig(model=str(int8_dir), device="cpu"), int8_dir)
    live = start_server(None, ServerConfig(served_model_name="minilm-int8"), embedder=embedder)
    try:
        client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
        out = client.embeddings.create(model="minilm-int8", input=TEXTS)
        got = torch.tensor([d.embedding for d in out.data])
        assert [d.index for d in out.data] == list(range(len(TEXTS)))
        assert (got - quantized.encode(TEXTS).embeddings).abs().max() < 1e-5
        assert _cosines(got, minilm.encode(TEXTS).embeddings).min() > 0.999
        assert out.usage.prompt_tokens == quantized.encode(TEXTS).num_prompt_tokens
    finally:
        live.stop()


@pytest.mark.slow
def test_mopt_embed_cli_on_the_folder(int8_dir, quantized, minilm, tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    args = ["embed", "--model", str(int8_dir), "--input", str(src), "--output", str(dst), "--device", "cpu"]
    assert main(args) == 0
    rows = sorted((json.loads(line) for line in dst.read_text().splitlines()), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(len(TEXTS)))
    got = torch.tensor([r["embedding"] for r in rows])
    assert (got - quantized.encode(TEXTS).embeddings).abs().max() < 1e-5
    assert _cosines(got, minilm.encode(TEXTS).embeddings).min() > 0.999


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fp8", "rtn-int4"])
def test_fp8_and_int4_folders_embed_as_the_in_place_rounding(method, minilm_dir, tmp_path):
    """Each packed layout `mopt quantize` writes loads back to the weights the method rounds to."""
    from model_optimizer.model.quantize.embed_accuracy import round_backbone
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.models.model_config import read_config

    folder = tmp_path / method
    args = ["quantize", str(minilm_dir), "--method", method, "--output", str(folder), "--min-cosine", "0"]
    assert main([*args, "--num-eval-samples", "4", "--device", "cpu"]) == 0
    served = Embedder(folder, device="cpu", dtype="float32")
    rounded = load_backbone(minilm_dir, read_config(minilm_dir), "float32", torch.device("cpu"), "auto")
    round_backbone(rounded, method)
    in_place = Embedder(minilm_dir, backbone=rounded, device="cpu")
    assert _cosines(served.encode(TEXTS).embeddings, in_place.encode(TEXTS).embeddings).min() > 1 - 1e-6
