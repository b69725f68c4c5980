"""The real all-MiniLM-L6-v2 against sentence-transformers on the same folder."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.runtime.embed.texts import varied_texts


@pytest.mark.slow
def test_matches_sentence_transformers_on_varied_texts(minilm, sentence_transformer):
    texts = varied_texts(220)
    ours = minilm.encode(texts)
    ref = torch.from_numpy(sentence_transformer.encode(texts, batch_size=64))
    cos = F.cosine_similarity(ours.embeddings, ref, dim=-1)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"text {worst} {texts[worst]!r}: cosine {cos[worst]:.6f}"
    assert ours.embeddings.shape == (220, 384)
    assert torch.allclose(ours.embeddings.norm(dim=-1), torch.ones(220), atol=1e-5)  # Normalize module read
    lengths = [len(t) for t in sentence_transformer.tokenizer(texts)["input_ids"]]
    assert ours.num_tokens == lengths


def test_one_text_alone_equals_it_inside_a_batch(minilm):
    texts = varied_texts(64, seed=1)
    batch = minilm.encode(texts).embeddings
    for i in (0, 17, 40, 63):
        alone = minilm.encode(texts[i]).embeddings[0]
        assert torch.allclose(alone, batch[i], atol=1e-5), i


@pytest.mark.slow
def test_small_token_budget_gives_same_vectors(minilm_dir, minilm):
    from model_optimizer.runtime.embed import Embedder

    texts = varied_texts(40, seed=2)
    tight = Embedder(minilm_dir, device="cpu", max_num_batched_tokens=64, max_num_seqs=3)
    assert torch.allclose(tight.encode(texts).embeddings, minilm.encode(texts).embeddings, atol=1e-5)


def test_too_long_is_an_error_and_truncation_matches_sentence_transformers(minilm, sentence_transformer):
    long_text = "tokens " * 400
    with pytest.raises(ValueError, match="more than the model's limit of 256.*truncate"):
        minilm.encode(["short", long_text])
    out = minilm.encode(["short", long_text], truncate_prompt_tokens=-1)
    assert out.num_tokens[1] == 256
    ref = torch.from_numpy(sentence_transformer.encode([long_text]))  # sentence-transformers cuts at 256 too
    assert F.cosine_similarity(out.embeddings[1:], ref).item() >= 0.9999


def test_truncate_to_k_tokens_keeps_the_closing_sep(minilm):
    text = "one two three four five six seven eight"
    cut = minilm.encode(text, truncate_prompt_tokens=5)
    assert cut.num_tokens == [5]
    ids = minilm.tokenizer(text)["input_ids"]
    expected = minilm.encode([ids[:4] + [ids[-1]]]).embeddings  # [CLS] t1 t2 t3 [SEP]
    assert torch.allclose(cut.embeddings, expected, atol=1e-6)
    for bad in (0, -2, 257, 1.5):
        with pytest.raises(ValueError, match="truncate_prompt_tokens"):
            minilm.encode(text, truncate_prompt_tokens=bad)


def test_dimensions_truncate_then_renormalize(minilm, minilm_dir, tmp_path):
    """MiniLM declares no Matryoshka training, so `dimensions` is refused (as the server refuses it); a copy
    whose config declares it is cut, then renormalized."""
    from model_optimizer.runtime.embed import Embedder

    texts = ["first text", "a second, longer text about embeddings"]
    with pytest.raises(ValueError, match="dimensions is not supported by this model"):
        minilm.encode(texts, dimensions=64)
    declared = tmp_path / "minilm"
    declared.mkdir()
    for f in minilm_dir.iterdir():
        if f.name != "config_sentence_transformers.json":
            (declared / f.name).symlink_to(f)
    (declared / "config_sentence_transformers.json").write_text('{"is_matryoshka": true}')
    matryoshka = Embedder(declared, device="cpu")
    full = matryoshka.encode(texts).embeddings
    short = matryoshka.encode(texts, dimensions=64).embeddings
    assert short.shape == (2, 64)
    assert torch.allclose(short, F.normalize(full[:, :64], dim=-1), atol=1e-6)
    for bad in (0, 385, "64"):
        with pytest.raises(ValueError, match="dimensions"):
            matryoshka.encode(texts, dimensions=bad)


def test_token_ids_and_text_give_the_same_vector(minilm):
    text = "token ids are taken as they are"
    ids = minilm.tokenizer(text)["input_ids"]
    assert torch.allclose(minilm.encode([ids]).embeddings, minilm.encode([text]).embeddings, atol=1e-6)
    assert len(minilm.embed(ids)) == 1  # a flat id list is one input
    with pytest.raises(ValueError, match="input 1 must be a string or a list of token ids"):
        minilm.encode(["ok", 3.5])
    with pytest.raises(ValueError, match=r"input 0 has token ids outside the vocabulary \[0, 30522\)"):
        minilm.encode([[101, 30522, 102]])
    with pytest.raises(ValueError, match="input 0 has no tokens"):
        minilm.encode([[]])
    assert minilm.encode([]).embeddings.shape == (0, 384)


def test_auto_dtype_is_float16_on_cuda_for_a_float32_checkpoint(minilm_dir):
    """vLLM's rule for `auto`; the CPU keeps float32, and an explicit dtype is always obeyed."""
    from model_optimizer.runtime.embed.backbone import embed_dtype
    from model_optimizer.runtime.models.bert import BertArgs
    from model_optimizer.runtime.models.model_config import read_config

    args = BertArgs.from_dict(read_config(minilm_dir))
    assert args.torch_dtype == "float32"
    assert embed_dtype("auto", args, torch.device("cuda")) == torch.float16  # an encoder
    assert embed_dtype("auto", args, torch.device("cpu")) == torch.float32
    assert embed_dtype("float32", args, torch.device("cuda")) == torch.float32
