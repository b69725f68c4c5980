"""Tiny random BERT and XLM-RoBERTa encoders against transformers' AutoModel; concurrent use."""

from __future__ import annotations

import asyncio
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F


def _build(kind: str, root, minilm_dir):
    import transformers

    common = dict(
        vocab_size=30522,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=80,
    )
    if kind == "bert":
        config = transformers.BertConfig(**common, hidden_act="gelu_new", type_vocab_size=2)
        model = transformers.BertModel(config)
    else:
        config = transformers.XLMRobertaConfig(**common, pad_token_id=1, type_vocab_size=1)
        model = transformers.XLMRobertaModel(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    out = root / kind
    model.save_pretrained(str(out), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, out / name)
    return out, model.eval()


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_random_encoder_matches_transformers(kind, tmp_path, minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    folder, hf = _build(kind, tmp_path, minilm_dir)
    emb = Embedder(folder, device="cpu", pooling="mean", normalize=False)
    gen = torch.Generator().manual_seed(1)
    inputs = [
        torch.randint(3, 30000, (n,), generator=gen).tolist() for n in (1, 5, 17, 60, 60 if kind == "bert" else 78)
    ]
    ours = emb.encode(inputs).embeddings
    with torch.no_grad():
        ref = torch.stack([hf(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0) for ids in inputs])
    assert torch.allclose(ours, ref, atol=1e-4), (ours - ref).abs().max()
    assert emb.max_seq_length == (80 if kind == "bert" else 78)  # RoBERTa positions start after the padding index


def test_threads_and_asyncio_share_one_embedder(minilm):
    texts = [f"text number {i} " * (1 + i % 5) for i in range(24)]
    expected = minilm.encode(texts).embeddings
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: minilm.encode(texts[i]).embeddings[0], range(24)))
    assert torch.allclose(torch.stack(results), expected, atol=1e-5)

    async def many():
        return await asyncio.gather(*(minilm.aencode(texts[i : i + 6], normalize=False) for i in range(0, 24, 6)))

    outs = asyncio.run(many())  # MiniLM takes no `dimensions` (no Matryoshka training): unnormalized vectors instead
    assert torch.allclose(F.normalize(torch.cat([o.embeddings for o in outs]), dim=-1), expected, atol=1e-5)
    assert sum(o.num_prompt_tokens for o in outs) == sum(minilm.encode(texts).num_tokens)
