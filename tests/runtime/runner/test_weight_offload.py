"""Weight offload (cpu_offload_gb) on the CPU: host buffers and "device" slots are both CPU tensors, but the
packing, the two slots taking turns and the hooks' copies are the GPU's; greedy output must not change."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.runner.weight_offload import choose_offloaded_layers, decoder_layers, layer_weights
from tests import tiny_checkpoints as tiny

NUM_LAYERS = 5
GREEDY = SamplingParams(temperature=0, max_tokens=12)
PROMPTS = [[5, 17, 300, 41, 9, 77], [900, 3, 3, 250, 12, 64, 8, 199, 4, 31, 600], [42]]


@pytest.fixture(scope="module")
def five_layers(tmp_path_factory):
    """A tiny Qwen3 with five layers: three offloaded ones cycle through both slots and back."""
    config = tiny.tiny_config("qwen3", num_hidden_layers=NUM_LAYERS, head_dim=16, tie_word_embeddings=True)
    return tiny.build_checkpoint(tmp_path_factory.mktemp("offload") / "qwen3", config, seed=7)


def layer_bytes(llm: LLM) -> list[int]:
    layers = decoder_layers(llm.runner.model)
    return [sum(t.numel() * t.element_size() for _, _, t in layer_weights(layer)) for layer in layers]


def greedy(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]


def transformers_greedy(model_dir) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    outputs = []
    for prompt in PROMPTS:
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0)
        outputs.append(out[0, len(prompt) :].tolist())
    return outputs


def test_layers_are_spread_evenly_and_reach_the_budget():
    assert choose_offloaded_layers([10] * 8, 1) == [7]
    assert choose_offloaded_layers([10] * 8, 11) == [3, 7]
    assert choose_offloaded_layers([10] * 8, 40) == [1, 3, 5, 7]
    assert choose_offloaded_layers([10] * 8, 80) == list(range(8))
    assert choose_offloaded_layers([5, 5, 30, 5], 31) == [0, 1, 2, 3]  # spread first: the big layer comes last


def test_more_than_the_layers_hold_is_a_clear_error(five_layers):
    with pytest.raises(ValueError, match="cpu_offload_gb asks for .* offload at most"):
        LLM(str(five_layers), dtype="float32", kv_cache_memory=1 << 22, cpu_offload_gb=1.0)
    with pytest.raises(ValueError, match="cpu_offload_gb must be a number of GiB >= 0"):
        EngineConfig(cpu_offload_gb=-1)


def test_offloaded_greedy_matches_plain_and_transformers(five_layers):
    plain = LLM(str(five_layers), dtype="float32", kv_cache_memory=1 << 22)
    expected = greedy(plain)
    assert expected == transformers_greedy(five_layers)
    sizes = layer_bytes(plain)
    budget_gib = (sizes[1] + sizes[3] + 1) / 2**30  # more than two layers: three are offloaded
    llm = LLM(str(five_layers), dtype="float32", kv_cache_memory=1 << 22, cpu_offload_gb=budget_gib)
    offload = llm.runner.model.weight_offload
    assert offload.layer_ids == [0, 2, 4]  # (j + 1) * 5 // 3 - 1
    assert len(offload.slots) == 2 and offload.host_bytes >= sum(sizes[i] for i in (0, 2, 4))
    layers = decoder_layers(llm.runner.model)
    for k, i in enumerate(offload.layer_ids):  # every weight of an offloaded layer is a view into its slot
        slot = offload.slots[k % 2]
        for _, _, tensor in layer_weights(layers[i]):
            assert slot.data_ptr() <= tensor.data_ptr() < slot.data_ptr() + len(slot)
    copies_before = offload.num_copies
    assert greedy(llm) == expected
    assert offload.num_copies > copies_before and (offload.num_copies - copies_before) % 3 == 0


@pytest.mark.parametrize("method", ["int8", "rtn-int4"])
def test_quantized_weights_offload_with_the_same_output(quant_model, method):
    model_dir = str(quant_model("qwen3"))
    plain = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 22, quantization=method)
    expected = greedy(plain)
    full_bytes = layer_bytes(plain)
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 22, quantization=method, cpu_offload_gb=1e-9)
    offload = llm.runner.model.weight_offload
    assert offload.layer_ids == [1]
    assert offload.host_bytes < full_bytes[1] * 1.1  # the quantized bytes move (float ones are 4-8x more)
    assert greedy(llm) == expected


@pytest.mark.parametrize("name", ["gemma3", "qwen3_moe", "mixtral", "glm4", "glm4_moe", "deepseek_v3"])
def test_every_family_offloads_with_the_same_output(tiny_model, name):
    """Layers of other kinds (experts, latent attention, sliding windows) pack and stream the same way."""
    model_dir = str(tiny_model(name))
    expected = greedy(LLM(model_dir, dtype="float32", kv_cache_memory=1 << 22))
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 22, cpu_offload_gb=1e-9)
    assert llm.runner.model.weight_offload.layer_ids == [len(decoder_layers(llm.runner.model)) - 1]
    assert greedy(llm) == expected
