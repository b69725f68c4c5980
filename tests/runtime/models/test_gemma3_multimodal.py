"""Gemma 3's image-and-text checkpoints (4B-27B, `Gemma3ForConditionalGeneration`) served as their language
model: the text config's gaps filled with transformers' defaults, the language model's tensors loaded under
their text names, the vision tower left out; greedy tokens equal transformers' on the same text."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.models.model_config import read_config
from tests.tiny_checkpoints import _spread_weights

TEXT = dict(vocab_size=1032, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4)
TEXT |= dict(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=16, eos_token_id=2)
TEXT |= dict(max_position_embeddings=512, layer_types=["sliding_attention", "full_attention", "sliding_attention"])
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32)


@pytest.fixture(scope="module")
def multimodal(tmp_path_factory):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    config = Gemma3Config(
        text_config=TEXT, vision_config=VISION | {"patch_size": 16}, mm_tokens_per_image=4, image_token_index=1030
    )
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(config)
    _spread_weights(model, 0)
    folder = tmp_path_factory.mktemp("gemma3") / "mm"
    model.save_pretrained(str(folder))
    return folder


def test_the_language_model_gives_transformers_tokens(multimodal):
    from transformers import Gemma3ForConditionalGeneration

    reference = Gemma3ForConditionalGeneration.from_pretrained(
        str(multimodal), dtype=torch.float32, attn_implementation="eager"
    ).eval()
    llm = LLM(str(multimodal), dtype="float32", kv_cache_memory=1 << 22, skip_tokenizer_init=True)
    prompts = [[5, 6, 7], [9, 300, 17, 4, 88, 23, 41, 7, 12, 500, 3, 6, 77, 19, 20, 21, 22, 23]]
    ours = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    for prompt, out in zip(prompts, ours):
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == expected[0, len(prompt) :].tolist()


def test_a_hub_style_text_config_takes_transformers_defaults(tmp_path):
    """gemma-3-4b-it's text_config names five settings; the rest are Gemma3TextConfig's defaults."""
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "eos_token_id": [1, 106],
        "torch_dtype": "bfloat16",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    hf = read_config(tmp_path)
    assert hf["architectures"] == ["Gemma3ForCausalLM"] and hf["text_of"] == "Gemma3ForConditionalGeneration"
    assert (hf["hidden_size"], hf["num_hidden_layers"], hf["sliding_window"]) == (2560, 34, 1024)
    assert (hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"]) == (8, 4, 256)
    assert (hf["vocab_size"], hf["query_pre_attn_scalar"], hf["eos_token_id"]) == (262208, 256, [1, 106])
    (tmp_path / "config.json").write_text(json.dumps({**config, "text_config": None}))
    with pytest.raises(ValueError, match="needs a 'text_config'"):
        read_config(tmp_path)


def test_inspect_reads_the_language_model_and_leaves_the_vision_tower(multimodal, capsys):
    from model_optimizer.cli.main import main

    assert main(["inspect", str(multimodal)]) == 0  # warnings only (no tokenizer files)
    out = capsys.readouterr().out
    assert "Gemma3ForCausalLM" in out and "tensors map to the engine's parameters" in out


def test_the_tools_take_it_as_its_language_model(multimodal, tmp_path):
    """mopt quantize writes the text model it wrote tensors for (Gemma3ForCausalLM, loadable elsewhere too);
    mopt inspect --fix refuses to rewrite it; the tuner's cost model reads its language model."""
    from model_optimizer.model.inspect.fix import FixOptions, fix_checkpoint
    from model_optimizer.model.quantize.writer import save_compressed_tensors
    from model_optimizer.optimizer.tune.model_cost import model_cost
    from model_optimizer.runtime.models.loader import load_model

    model = load_model(multimodal, "float32", torch.device("cpu"), quantization="int8")
    save_compressed_tensors(model, "int8", 128, multimodal, tmp_path / "int8")
    written = json.loads((tmp_path / "int8" / "config.json").read_text())
    assert written["architectures"] == ["Gemma3ForCausalLM"] and "text_of" not in written
    assert "vision_config" not in written and written["num_hidden_layers"] == 3
    llm = LLM(str(tmp_path / "int8"), dtype="float32", kv_cache_memory=1 << 22, skip_tokenizer_init=True)
    assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))[0].outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="does not rewrite a Gemma3ForConditionalGeneration"):
        fix_checkpoint(multimodal, tmp_path / "fixed", FixOptions())
    assert model_cost(read_config(multimodal), "float32") is not None


def test_an_ignore_list_naming_the_checkpoint_s_own_paths_is_honoured(multimodal):
    """A pre-quantized image-and-text release may ignore a layer by its full checkpoint name; our module of
    that name stays in float."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization
    from model_optimizer.runtime.layers.quantization.spec import resolve_spec
    from model_optimizer.runtime.models.loader import build_model
    from model_optimizer.runtime.models.model_config import DecoderArgs
    from model_optimizer.runtime.models.registry import resolve_model_class

    hf = read_config(multimodal)
    args = DecoderArgs.from_dict(hf)
    model = build_model(lambda: resolve_model_class(args.architecture)(args), torch.float32, torch.device("cpu"))
    spec = resolve_spec(hf, "int8")
    spec.ignore.append("language_model.model.layers.0.mlp.down_proj")
    names = [name for name, _ in attach_quantization(model, spec, torch.float32, dummy=True)]
    assert "model.layers.0.mlp.down_proj" not in names and "model.layers.1.mlp.down_proj" in names
