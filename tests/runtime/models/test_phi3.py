"""Phi-3 / Phi-4 beyond the families' shared tests (conftest's `phi3`, `phi3_partial` rows): longrope against
transformers (short factors within the original length, long ones beyond it), each rank's share of the fused
q/k/v and gate/up tensors, and the config keys transformers' Phi3 reads its own way."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from model_optimizer.runtime.models.loader import load_model
from model_optimizer.runtime.models.phi3 import phi3_config
from tests import tiny_checkpoints as tiny
from tests.runtime.models.test_families_engine import shared_prefix_prompts
from tests.runtime.models.test_matches_transformers import (
    NUM_NEW,
    TOP_K,
    assert_matches_transformers,
    hf_generate,
    hf_model,
    prompts,
)
from tests.runtime.spawn import run_ranks

ORIGINAL = 128
"""original_max_position_embeddings of the longrope checkpoints; their context is 512 (a scale of 4, so an
attention factor of sqrt(1 + ln 4 / ln 128), as Phi-3-mini-128k's 32 gives its own)."""


def longrope(half_width: int) -> dict:
    """Factor lists far from 1 (a test that ignored either would see other tokens), the short ones below the long."""
    return {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.6 * i for i in range(half_width)],
        "long_factor": [1.5 + 2.0 * i for i in range(half_width)],
    }


LONGROPE = dict(max_position_embeddings=4 * ORIGINAL, original_max_position_embeddings=ORIGINAL)
LONGROPE_MODELS = {
    # Phi-3-mini-128k / Phi-3.5-mini: whole heads (16 wide) rotated, untied
    "phi3_longrope": LONGROPE | dict(rope_scaling=longrope(8)),
    # Phi-4-mini: 0.75 of each 32-wide head rotated (24: 12 factors), one KV head, tied embeddings (transformers
    # checks the lists' length against hidden_size / heads, so the heads are that wide)
    "phi4_mini_longrope": LONGROPE
    | dict(rope_scaling=longrope(12), partial_rotary_factor=0.75, hidden_size=128, num_key_value_heads=1)
    | dict(tie_word_embeddings=True),
}


def build_longrope(root: Path, name: str, tokenizer_dir: Path) -> Path:
    """Save LONGROPE_MODELS[name] with transformers' Phi3ForCausalLM, the tokenizer copied from `tokenizer_dir`."""
    out = root / name
    if not (out / "config.json").is_file():
        config = tiny.tiny_config("phi3", **LONGROPE_MODELS[name])
        tiny.build_checkpoint(out, config, seed=zlib.crc32(name.encode()) % 1000, with_tokenizer=False)
        for f in tokenizer_dir.glob("tokenizer*"):
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def longrope_model(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("longrope")
    return lambda name: build_longrope(root, name, tiny_model("phi3"))


def greedy_reference(model_dir: Path, batch: list[list[int]], max_new: int) -> list[list[int]]:
    reference = hf_model(model_dir, torch.float32)
    return [hf_generate(reference, prompt)[0][:max_new] for prompt in batch]


@pytest.mark.parametrize("name", sorted(LONGROPE_MODELS))
def test_longrope_within_the_original_length_matches_transformers(longrope_model, name):
    """max_model_len 128 = the original length: the short factors, as transformers takes them for every
    sequence that fits, and the attention factor; tokens identical, logprobs within 1e-4."""
    model_dir = longrope_model(name)
    llm = LLM(str(model_dir), dtype="float32", kv_cache_memory=1 << 24, block_size=16, max_model_len=ORIGINAL)
    batch = prompts(llm.runner.vocab_size, seed=len(name))  # up to 60 + 24 tokens: within 128
    outputs = llm.generate(batch, SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K))
    assert_matches_transformers(model_dir, batch, outputs)


@pytest.mark.parametrize("name", sorted(LONGROPE_MODELS))
def test_longrope_prefix_hits_chunks_and_preemption_match_transformers(longrope_model, name):
    model_dir = longrope_model(name)
    batch = shared_prefix_prompts(seed=len(name))
    greedy = SamplingParams(temperature=0, max_tokens=16)
    expected = greedy_reference(model_dir, batch, 16)
    cached = LLM(
        str(model_dir), dtype="float32", kv_cache_memory=1 << 24, block_size=4, max_num_seqs=1, max_model_len=ORIGINAL
    )
    assert [o.outputs[0].token_ids for o in cached.generate(batch, greedy)] == expected
    assert cached.engine.stats().prefix_cache_hits >= 5 * 20
    chunked = LLM(
        str(model_dir),
        dtype="float32",
        num_kv_blocks=36,
        block_size=4,
        max_model_len=ORIGINAL,
        max_num_batched_tokens=7,
        enable_prefix_caching=False,
    )
    assert [o.outputs[0].token_ids for o in chunked.generate(batch, greedy)] == expected
    assert chunked.engine.stats().num_preemptions > 0


@pytest.mark.parametrize("name", sorted(LONGROPE_MODELS))
def test_longrope_past_the_original_length_takes_the_long_factors_as_transformers(longrope_model, name):
    """The default max_model_len (512, past 128): the long factors for every position, which is what
    transformers takes for a prompt longer than the original length."""
    model_dir = longrope_model(name)
    llm = LLM(str(model_dir), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    assert llm.runner.max_model_len == 4 * ORIGINAL  # config.json's max_position_embeddings: longrope keeps it
    batch = [[3 + (7 * i + n) % 1000 for i in range(n)] for n in (ORIGINAL + 12, 300)]
    outputs = llm.generate(batch, SamplingParams(temperature=0, max_tokens=NUM_NEW))
    assert [o.outputs[0].token_ids for o in outputs] == greedy_reference(model_dir, batch, NUM_NEW)


@pytest.mark.parametrize("name", sorted(LONGROPE_MODELS))
def test_rotary_tables_are_transformers_short_or_long_by_max_model_len(longrope_model, name):
    """Our cos/sin tables against transformers' Phi3RotaryEmbedding at a length within the original (short
    factors) and past it (long): max_model_len 128 gives the first, 129 and the default the second."""
    from transformers import AutoConfig
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    model_dir = longrope_model(name)
    theirs = Phi3RotaryEmbedding(AutoConfig.from_pretrained(model_dir))
    x = torch.zeros(1, dtype=torch.float32)
    for max_model_len, length in ((ORIGINAL, ORIGINAL), (ORIGINAL + 1, 300), (None, 300)):
        cos, sin = theirs(x, torch.arange(length)[None])
        half = cos.shape[-1] // 2
        rotary = load_model(model_dir, "float32", torch.device("cpu"), max_model_len=max_model_len).model.layers[0]
        ours = rotary.self_attn.rotary
        torch.testing.assert_close(ours.cos[:length], cos[0, :, :half], rtol=0, atol=1e-6)
        torch.testing.assert_close(ours.sin[:length], sin[0, :, :half], rtol=0, atol=1e-6)
        assert ours.cos.shape[-1] == half


def _fused_rows(model_dir: str) -> dict[str, torch.Tensor]:
    """This rank's layer-0 fused weights, loaded from the checkpoint under the current tensor parallelism."""
    model = load_model(model_dir, "float32", torch.device("cpu"))
    layer = model.model.layers[0]
    return {"qkv": layer.self_attn.qkv_proj.weight.detach(), "gate_up": layer.mlp.gate_up_proj.weight.detach()}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "heads", "kv_heads", "head_dim"), [("phi3", 4, 2, 16), ("phi3_partial", 4, 1, 32)])
def test_each_rank_keeps_its_rows_of_each_fused_shard(tiny_model, name, heads, kv_heads, head_dim):
    """q/k/v and gate/up are split per rank within each shard (two KV heads: one each; one KV head: both
    ranks hold it), not the fused tensor cut in halves."""
    from safetensors.torch import load_file

    model_dir = str(tiny_model(name))
    ckpt = load_file(f"{model_dir}/model.safetensors")
    qkv = ckpt["model.layers.0.self_attn.qkv_proj.weight"]
    gate, up = ckpt["model.layers.0.mlp.gate_up_proj.weight"].chunk(2)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
    for rank, rows in enumerate(run_ranks(_fused_rows, 2, model_dir)):
        kv_rows = slice(rank * k.shape[0] // 2, (rank + 1) * k.shape[0] // 2) if kv_heads > 1 else slice(None)
        want_qkv = torch.cat([q.chunk(2)[rank], k[kv_rows], v[kv_rows]])
        torch.testing.assert_close(rows["qkv"], want_qkv, rtol=0, atol=0)
        torch.testing.assert_close(rows["gate_up"], torch.cat([gate.chunk(2)[rank], up.chunk(2)[rank]]), rtol=0, atol=0)


def test_phi3_reads_legacy_rope_names_and_its_own_defaults():
    """As transformers' Phi3Config: "su" and "yarn" are longrope, other scalings are refused; rms_norm_eps 1e-5
    and a top-level original_max_position_embeddings of 4096 when config.json has neither."""
    factors = {"short_factor": [1.0], "long_factor": [2.0]}
    read = phi3_config({"rope_scaling": {"type": "su", **factors}, "rms_norm_eps": None})
    assert read["rope_scaling"] == {"rope_type": "longrope", **factors}
    assert read["rms_norm_eps"] == 1e-5 and read["original_max_position_embeddings"] == 4096
    assert phi3_config({"rope_parameters": {"rope_type": "yarn"}})["rope_parameters"]["rope_type"] == "longrope"
    kept = phi3_config({"original_max_position_embeddings": 64, "rms_norm_eps": 1e-6})
    assert kept["original_max_position_embeddings"] == 64 and kept["rms_norm_eps"] == 1e-6
    with pytest.raises(ValueError, match="rope_type 'linear' is not supported for Phi3ForCausalLM"):
        phi3_config({"rope_scaling": {"type": "linear", "factor": 2.0}})


def test_longrope_is_phi3s_alone():
    """The Llama-family classes do not read longrope (their rotary is not told max_model_len): refused there."""
    from model_optimizer.runtime.layers.rotary import RopeConfig

    factors = {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    hf = {"rope_scaling": {"rope_type": "longrope", **factors}, "original_max_position_embeddings": 128}
    with pytest.raises(ValueError, match="rope_type 'longrope' is not supported; supported: default, linear"):
        RopeConfig.from_hf(hf, 16, 512)
    assert RopeConfig.from_hf(hf, 16, 512, rope_types=("default", "longrope")).longrope["factors"] == [2.0] * 8


def test_a_phi4_mini_attention_bias_key_is_ignored_as_transformers_does(tiny_model, tmp_path):
    """Phi-4-mini's config.json says attention_bias (false); true would still build no bias, as in transformers."""
    folder = tmp_path / "bias"
    shutil.copytree(tiny_model("phi3_partial"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"attention_bias": True, "mlp_bias": True}))
    model = load_model(folder, "float32", torch.device("cpu"))  # would lack the bias tensors otherwise
    assert all(not name.endswith(".bias") for name, _ in model.named_parameters())


def test_inspect_and_the_engine_read_an_early_phi3_su_config(longrope_model, tmp_path, capsys):
    """Early Phi-3-mini-128k revisions name longrope "su" in a transformers 4 `rope_scaling`: inspect calls the
    folder loadable with longrope, and the engine builds the very tables the "longrope" spelling gives."""
    source = longrope_model("phi4_mini_longrope")
    folder = tmp_path / "su"
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    rope = {k: v for k, v in config.pop("rope_parameters").items() if k not in ("rope_type", "type")}
    (folder / "config.json").write_text(json.dumps(config | {"rope_scaling": rope | {"type": "su"}}))
    assert main(["inspect", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    findings = {f["id"]: f for f in doc["findings"]}
    assert doc["model"]["architecture"] == "Phi3ForCausalLM" and doc["load_check"]["as_is"]["loads"] is True
    assert findings["rope.supported"]["title"].startswith("rope type longrope")
    ours, theirs = (
        load_model(f, "float32", torch.device("cpu")).model.layers[0].self_attn.rotary for f in (folder, source)
    )
    assert torch.equal(ours.cos, theirs.cos) and torch.equal(ours.sin, theirs.sin)
