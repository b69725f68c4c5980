"""`truncate_prompt_tokens` cuts texts and token-id lists on one side, the tokenizer's `truncation_side`:
"right" keeps the beginning (sentence-transformers, and vLLM for pooling models, which loads their
tokenizers with truncation_side="right"); a tokenizer that declares "left" keeps the end of both."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from model_optimizer.runtime.embed import Embedder

TEXT = "the first words come here and then many middle words and at last the final words of it"


@pytest.fixture(scope="module")
def left_minilm(minilm_dir, tmp_path_factory):
    """MiniLM whose tokenizer_config.json says truncation_side "left"."""
    folder = tmp_path_factory.mktemp("minilm_left") / "minilm"
    shutil.copytree(minilm_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "truncation_side": "left"}))
    return Embedder(folder, device="cpu")


def _cut(embedder: Embedder, item, k: int) -> list[int]:
    return embedder.encode([item], truncate_prompt_tokens=k, keep_token_ids=True).token_ids[0]


@pytest.mark.parametrize("k", [3, 6])
def test_right_side_keeps_the_beginning_of_text_and_token_ids(minilm, k):
    ids = minilm.tokenizer(TEXT)["input_ids"]  # [CLS] ... [SEP]
    assert minilm.tokenizer.truncation_side == "right"
    assert _cut(minilm, ids, k) == ids[:k]
    assert _cut(minilm, TEXT, k) == ids[: k - 1] + [ids[-1]]  # the text keeps its closing [SEP]


@pytest.mark.parametrize("k", [3, 6])
def test_left_side_keeps_the_end_of_text_and_token_ids(left_minilm, k):
    ids = left_minilm.tokenizer(TEXT)["input_ids"]
    assert left_minilm.tokenizer.truncation_side == "left"
    assert _cut(left_minilm, ids, k) == ids[-k:]  # was ids[:k]: the other side from a text's
    assert _cut(left_minilm, TEXT, k) == [ids[0]] + ids[-(k - 1) :]  # [CLS] and the last words, [SEP] included


def test_the_model_limit_cuts_ids_on_the_tokenizers_side_too(left_minilm):
    limit = left_minilm.max_seq_length
    ids = left_minilm.tokenizer(" ".join([TEXT] * 20))["input_ids"]
    assert len(ids) > limit
    out = left_minilm.encode([ids, ids[-limit:]], truncate_prompt_tokens=-1, keep_token_ids=True)
    assert out.token_ids[0] == ids[-limit:]
    assert torch.allclose(out.embeddings[0], out.embeddings[1])
