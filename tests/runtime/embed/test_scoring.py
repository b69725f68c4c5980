"""LLM.score on the real MiniLM: sentence-transformers' cosine similarity of the two texts' embeddings, vLLM's
pairing rule, each distinct text embedded once."""

from __future__ import annotations

import pytest

from model_optimizer import LLM
from model_optimizer.runtime.embed.scoring import distinct_inputs, score_pairs

QUERY = "What is the capital of France?"
DOCUMENTS = ["The capital of Brazil is Brasilia.", "The capital of France is Paris.", "Cats sleep a lot."]


@pytest.fixture(scope="module")
def llm(minilm_dir):
    with LLM(str(minilm_dir), device="cpu") as llm:
        yield llm


def reference(sentence_transformer, firsts: list[str], seconds: list[str]) -> list[float]:
    from sentence_transformers import util

    a = sentence_transformer.encode(firsts, convert_to_tensor=True)
    b = sentence_transformer.encode(seconds, convert_to_tensor=True)
    return util.cos_sim(a, b).diagonal().tolist() if len(firsts) == len(seconds) else util.cos_sim(a, b)[0].tolist()


def test_one_query_against_documents_equals_sentence_transformers(llm, sentence_transformer):
    outputs = llm.score(QUERY, DOCUMENTS, use_tqdm=False)
    scores = [o.outputs.score for o in outputs]
    assert scores == pytest.approx(reference(sentence_transformer, [QUERY], DOCUMENTS), abs=1e-5)
    assert max(range(3), key=scores.__getitem__) == 1  # Paris
    ids = llm.get_tokenizer()
    pad = [ids.pad_token_id]  # vLLM joins a pair's ids with the pad token
    assert outputs[0].prompt_token_ids == ids(QUERY)["input_ids"] + pad + ids(DOCUMENTS[0])["input_ids"]


def test_pairs_in_order_and_token_ids(llm, sentence_transformer):
    firsts = ["a red car", "a blue sky"]
    seconds = ["a crimson automobile", "the ocean"]
    scores = [o.outputs.score for o in llm.score(firsts, seconds, use_tqdm=False)]
    assert scores == pytest.approx(reference(sentence_transformer, firsts, seconds), abs=1e-5)
    ids = llm.get_tokenizer()(firsts[0])["input_ids"]
    by_ids = llm.score(ids, seconds[0], use_tqdm=False)[0].outputs.score
    assert by_ids == pytest.approx(scores[0], abs=1e-6)


def test_counts_that_do_not_pair_are_refused(llm):
    with pytest.raises(ValueError, match="as many first texts as second texts"):
        llm.score(["a", "b"], ["c", "d", "e"])
    with pytest.raises(ValueError, match="non-empty list"):
        llm.score([], ["c"])


def test_each_distinct_text_is_embedded_once():
    inputs, pairs, names = distinct_inputs(score_pairs("q", ["d1", "q", "d1"]))
    assert inputs == ["q", "d1"] and pairs == [(0, 1), (0, 0), (0, 1)] and names == ["input 0", "input 1"]


def test_vllm_prompt_dicts_and_tuples_of_ids(llm):
    by_text = llm.score("a red car", "a crimson automobile", use_tqdm=False)[0].outputs.score
    by_dict = llm.score({"prompt": "a red car"}, [{"prompt": "a crimson automobile"}], use_tqdm=False)[0]
    assert by_dict.outputs.score == pytest.approx(by_text, abs=1e-6)
    ids = tuple(llm.get_tokenizer()("a red car")["input_ids"])
    assert len(llm.score(ids, ["x", "y"], use_tqdm=False)) == 2  # a tuple of ids is one text
    by_ids = llm.score({"prompt_token_ids": list(ids)}, "a crimson automobile", use_tqdm=False)[0].outputs.score
    assert by_ids == pytest.approx(by_text, abs=1e-6)
    with pytest.raises(ValueError, match="prompt dict"):
        llm.score({"text": "a"}, "b")
