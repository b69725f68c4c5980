"""Decoder embedders (Qwen3-Embedding style) against a reference written with transformers' AutoModel."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.runtime.embed.texts import varied_texts


def reference(model_dir, texts: list[str]) -> torch.Tensor:
    """transformers, one text at a time: tokens + <|endoftext|>, last hidden state of the last token, L2 norm."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tok(text)["input_ids"] + [end]
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            out.append(F.normalize(hidden, dim=-1))
    return torch.stack(out)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return varied_texts(24, seed=3, max_words=60)


def test_matches_transformers_last_token_pooling(qwen3, qwen3_dir, texts):
    ours = qwen3.encode(texts).embeddings
    ref = reference(qwen3_dir, texts)
    cos = F.cosine_similarity(ours, ref, dim=-1)
    assert cos.min() >= 0.99999, cos
    assert torch.allclose(ours, ref, atol=1e-4)
    assert qwen3.pooling == "last" and qwen3.normalize


def test_base_model_layout_without_model_prefix_loads_the_same(qwen3, qwen3_base_dir, texts):
    from model_optimizer.runtime.embed import Embedder

    base = Embedder(qwen3_base_dir, device="cpu", dtype="float32")
    assert torch.allclose(base.encode(texts).embeddings, qwen3.encode(texts).embeddings, atol=1e-6)


def test_one_text_alone_equals_it_inside_a_batch(qwen3, texts):
    batch = qwen3.encode(texts).embeddings
    for i in (0, 5, len(texts) - 1):
        assert torch.allclose(qwen3.encode(texts[i]).embeddings[0], batch[i], atol=1e-5), i


def test_end_token_is_appended_once(qwen3):
    end = qwen3.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = qwen3.tokenizer("hello there")["input_ids"]
    from_text = qwen3.encode("hello there")
    assert from_text.num_tokens == [len(ids) + 1]
    assert torch.allclose(from_text.embeddings, qwen3.encode([ids + [end]]).embeddings, atol=1e-6)


def test_instruction_prefix(qwen3):
    task = "Given a web search query, retrieve relevant passages"
    with_instruction = qwen3.encode("what is a cat", instruction=task).embeddings
    spelled_out = qwen3.encode(f"Instruct: {task}\nQuery:what is a cat").embeddings  # Qwen3-Embedding's format
    assert torch.allclose(with_instruction, spelled_out, atol=1e-6)
    assert not torch.allclose(with_instruction, qwen3.encode("what is a cat").embeddings, atol=1e-3)


def test_custom_instruction_template(qwen3_dir):
    from model_optimizer.runtime.embed import Embedder

    with pytest.raises(ValueError, match="instruction_template"):
        Embedder(qwen3_dir, device="cpu", instruction_template="no placeholders")


def test_dimensions_and_truncation(qwen3, qwen3_dir):
    text = "one two three four five six seven eight nine ten"
    full = qwen3.encode(text).embeddings
    short = qwen3.encode(text, dimensions=16).embeddings
    assert short.shape == (1, 16) and torch.allclose(short, F.normalize(full[:, :16], dim=-1), atol=1e-6)
    cut = qwen3.encode(text, truncate_prompt_tokens=4)
    assert cut.num_tokens == [4]  # three text tokens, then the end token
    end = qwen3.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = qwen3.tokenizer(text)["input_ids"]
    assert torch.allclose(cut.embeddings, qwen3.encode([ids[:3] + [end]]).embeddings, atol=1e-6)
    from model_optimizer.runtime.embed import Embedder

    small = Embedder(qwen3_dir, device="cpu", dtype="float32", max_seq_length=8)
    with pytest.raises(ValueError, match=r"input 1 has \d+ tokens, more than the model's limit of 8"):
        small.encode(["short", text])
    assert small.encode(["short", text], truncate_prompt_tokens=-1).num_tokens[1] == 8


def test_max_seq_length_beyond_positions_is_refused(qwen3_dir):
    from model_optimizer.runtime.embed import Embedder

    with pytest.raises(ValueError, match="exceeds what the model's positions hold"):
        Embedder(qwen3_dir, device="cpu", max_seq_length=100_000)


def test_a_gemma3_decoder_embeds_with_its_own_attention_scale(tmp_path):
    """Gemma scales q.k by query_pre_attn_scalar ** -0.5: the packed (no KV cache) path scaled by head_dim ** -0.5,
    so LLM.embed on a Gemma 3 whose scalar differs from head_dim (the 27B: 168 against 128) was off
    (cosine 0.95 against transformers on this tiny model)."""
    from transformers import AutoModel

    from model_optimizer import LLM
    from tests import tiny_checkpoints as tiny

    config = tiny.tiny_config("gemma3", num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=7, sliding_window=8)
    folder = tiny.build_checkpoint(tmp_path / "gemma3", config, seed=1)
    llm = LLM(str(folder), kv_cache_memory=1 << 22, dtype="float32")
    [out] = llm.embed([{"prompt_token_ids": list(range(5, 16))}])
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([out.prompt_token_ids])).last_hidden_state[0, -1]
    assert F.cosine_similarity(torch.tensor(out.outputs.embedding), hidden, dim=0) > 0.99999


@pytest.fixture(scope="module")
def gemma2_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny Gemma 2 (Gemma2ForCausalLM) whose settings each change the vectors: scores capped at 5 (most
    exceed it), a sliding window shorter than the inputs, query_pre_attn_scalar 7 against head_dim 32;
    and the same weights saved as transformers' Gemma2Model, without the LM head (bge-multilingual-gemma2's
    layout)."""
    from transformers import AutoModel

    from tests import tiny_checkpoints as tiny

    root = tmp_path_factory.mktemp("gemma2_embed")
    config = tiny.tiny_config(
        "gemma2",
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=7,
        sliding_window=6,
        attn_logit_softcapping=5.0,
    )
    full = tiny.build_checkpoint(root / "full", config, seed=2)
    base = root / "base"
    AutoModel.from_pretrained(str(full), dtype=torch.float32).save_pretrained(str(base), safe_serialization=True)
    for f in full.glob("tokenizer*"):
        shutil.copy(f, base / f.name)
    return full, base


def gemma2_reference(model_dir: Path, token_ids: list[list[int]]) -> torch.Tensor:
    """transformers' Gemma2Model, eager attention (its SDPA path does not cap), one input at a time: the
    last token's final hidden state, L2-normalized."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = [model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1] for ids in token_ids]
    return F.normalize(torch.stack(hidden), dim=-1)


def assert_same_vectors(ours: torch.Tensor, ref: torch.Tensor) -> None:
    ours = F.normalize(ours, dim=-1)
    cos = F.cosine_similarity(ours, ref, dim=-1)
    assert cos.min() >= 0.99999, cos
    assert torch.allclose(ours, ref, atol=1e-5)


GEMMA2_TOKEN_LISTS = [list(range(5, 36)), [7, 3, 9], list(range(40, 52)), [11]]
"""Token-id inputs of different lengths, around the sliding window of 6, packed together."""


def gemma2_inputs(texts: list[str]) -> list:
    """Six texts, the two shortest of `texts` (empty, one letter) and its four longest, then the token lists."""
    return texts[:2] + sorted(texts, key=len)[-4:] + GEMMA2_TOKEN_LISTS


def test_a_gemma2_decoder_embeds_with_capped_scores_through_llm(gemma2_dirs, texts):
    from model_optimizer import LLM

    full, _ = gemma2_dirs
    llm = LLM(str(full), kv_cache_memory=1 << 22, dtype="float32")
    inputs = [x if isinstance(x, str) else {"prompt_token_ids": x} for x in gemma2_inputs(texts)]
    outputs = llm.embed(inputs)
    token_ids = [out.prompt_token_ids for out in outputs]
    assert token_ids[6:] == GEMMA2_TOKEN_LISTS and len({len(ids) for ids in token_ids}) > 6
    assert sum(len(ids) > 6 for ids in token_ids) >= 6  # past the window: both layer types differ
    ours = torch.tensor([out.outputs.embedding for out in outputs])
    assert_same_vectors(ours, gemma2_reference(full, token_ids))


def test_a_gemma2_base_model_folder_loads_as_an_embedder(gemma2_dirs, texts):
    from safetensors import safe_open

    from model_optimizer.runtime.embed import Embedder

    _, base = gemma2_dirs
    assert json.loads((base / "config.json").read_text())["architectures"] == ["Gemma2Model"]
    with safe_open(str(base / "model.safetensors"), "pt") as f:
        assert not any(name.startswith(("lm_head", "model.")) for name in f.keys())
    embedder = Embedder(base, device="cpu", dtype="float32")
    out = embedder.encode(gemma2_inputs(texts), keep_token_ids=True)
    assert embedder.pooling == "last" and out.token_ids[6:] == GEMMA2_TOKEN_LISTS
    assert_same_vectors(out.embeddings, gemma2_reference(base, out.token_ids))
