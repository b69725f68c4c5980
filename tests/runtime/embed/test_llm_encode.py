"""`LLM.encode`: vLLM's generic pooling entry, for the "embed" task: what `LLM.embed` computes, each vector a
float32 torch tensor in `.outputs.data`; other tasks refused by name. On a decoder and on an encoder folder."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, PoolingParams
from tests.tiny_checkpoints import build_encoder

TEXTS = ["hello world", "Paged attention keeps the KV cache in blocks."]


@pytest.fixture(scope="module")
def decoder(tiny_model):
    return LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22)


def test_encode_embed_gives_embeds_vectors_as_tensors(decoder):
    embedded = decoder.embed(TEXTS, use_tqdm=False)
    encoded = decoder.encode(TEXTS, pooling_task="embed", use_tqdm=False)
    assert [o.prompt_token_ids for o in encoded] == [e.prompt_token_ids for e in embedded]
    for out, expected in zip(encoded, embedded):
        assert out.finished and out.outputs.data.dtype == torch.float32 and out.outputs.data.dim() == 1
        assert torch.allclose(out.outputs.data, torch.tensor(expected.outputs.embedding), atol=1e-6)
    assert len({o.request_id for o in encoded + embedded}) == 4  # each output its own id, as vLLM numbers them


def test_encode_takes_pooling_params_and_a_prompt_dict(decoder):
    [out] = decoder.encode({"prompt_token_ids": [5, 6, 7]}, PoolingParams(dimensions=16, normalize=False))
    [raw] = decoder.embed([[5, 6, 7]], dimensions=16, pooling_params=PoolingParams(normalize=False))
    assert out.outputs.data.shape == (16,) and out.prompt_token_ids[:3] == [5, 6, 7]
    assert torch.allclose(out.outputs.data, torch.tensor(raw.outputs.embedding), atol=1e-6)


def test_encode_refuses_other_tasks_and_lora(decoder):
    for task in ("classify", "score", "token_embed", "reward"):
        with pytest.raises(ValueError, match=rf"pooling_task '{task}' is not supported: LLM.encode serves embed"):
            decoder.encode(TEXTS, pooling_task=task)
    with pytest.raises(ValueError, match="LoRA adapters are not supported"):
        decoder.encode(TEXTS, lora_request=object())  # type: ignore[arg-type]


def test_an_encoder_folder_encodes_and_has_no_prefix_cache_to_reset(tmp_path):
    llm = LLM(str(build_encoder(tmp_path / "bert", hidden_size=64, intermediate_size=128)))
    [out] = llm.encode("one text", use_tqdm=False)
    [expected] = llm.embed("one text", use_tqdm=False)
    assert torch.allclose(out.outputs.data, torch.tensor(expected.outputs.embedding), atol=1e-6)
    assert llm.reset_prefix_cache() is True
