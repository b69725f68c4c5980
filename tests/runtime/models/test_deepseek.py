"""DeepSeek-V2/V3 pieces against transformers' own: routers, YaRN rotary and softmax scale, the absorbed
attention through the engine, the latent cache's size, checkpoint quirks and config errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.layers.mla import MlaAttention
from model_optimizer.runtime.layers.yarn_rotary import LatentRotary, softmax_scale
from model_optimizer.runtime.models.deepseek_moe import DeepseekV2Router, DeepseekV3Router, deepseek_moe_args
from tests.conftest import YARN
from tests.runtime.models.test_families_engine import GREEDY, reference, token_ids


def _routers(kind: str, **overrides):
    """(ours, transformers') router of one config with the same random weights (and correction bias)."""
    import transformers

    from tests.tiny_checkpoints import tiny_config

    config = tiny_config(kind, n_routed_experts=32, num_experts_per_tok=6, **overrides)
    hf = json.loads(config.to_json_string()) | {"architectures": [f"DeepseekV{kind[-1]}ForCausalLM"]}
    module = getattr(transformers.models, kind)
    theirs = getattr(module, f"modeling_{kind}").__dict__[f"DeepseekV{kind[-1]}TopkRouter"](config)
    ours = (DeepseekV3Router if kind.endswith("3") else DeepseekV2Router)(64, deepseek_moe_args(hf), hf)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(theirs.weight.shape, generator=gen))
        ours.weight.copy_(theirs.weight)
        if kind.endswith("3"):
            theirs.e_score_correction_bias.copy_(0.3 * torch.randn(32, generator=gen))
            ours.e_score_correction_bias.copy_(theirs.e_score_correction_bias)
    return ours, theirs


def _same_routing(ours, theirs) -> None:
    x = torch.randn(50, 64, generator=torch.Generator().manual_seed(1))
    weights, ids = ours(x)
    _, ref_weights, ref_ids = theirs(x)
    order, ref_order = ids.sort(dim=-1), ref_ids.sort(dim=-1)  # both pick top-k unsorted
    assert torch.equal(order.values, ref_order.values)
    assert torch.allclose(weights.gather(1, order.indices), ref_weights.gather(1, ref_order.indices), atol=1e-6)


@pytest.mark.parametrize("groups", [dict(n_group=8, topk_group=3), dict(n_group=1, topk_group=1)])
def test_v3_router_matches_transformers(groups):
    ours, theirs = _routers("deepseek_v3", norm_topk_prob=True, routed_scaling_factor=2.5, **groups)
    _same_routing(ours, theirs)


@pytest.mark.parametrize("norm_topk_prob", [False, True])  # transformers' V2 router reads no norm_topk_prob
@pytest.mark.parametrize("method", ["greedy", "group_limited_greedy"])
def test_v2_router_matches_transformers(method, norm_topk_prob):
    settings = dict(n_group=8, topk_group=3, routed_scaling_factor=16.0)
    ours, theirs = _routers("deepseek_v2", topk_method=method, norm_topk_prob=norm_topk_prob, **settings)
    _same_routing(ours, theirs)


@pytest.mark.parametrize("interleave", [True, False])
def test_rotary_and_softmax_scale_match_transformers(interleave):
    """YaRN frequencies with the mscale attention factor, pairs or halves, and the softmax correction; the
    rotated layout may differ from transformers' (one permutation for q and k), so dot products are compared."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

    rope = YARN | {"factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707}
    config = DeepseekV3Config(qk_rope_head_dim=64, max_position_embeddings=4096, rope_parameters=rope)
    config.rope_interleave = interleave
    cfg = json.loads(config.to_json_string()) | {"architectures": ["DeepseekV3ForCausalLM"]}
    ours = LatentRotary(cfg, 64, 4096)
    positions = torch.tensor([0, 1, 17, 500, 4000])
    q, k = torch.randn(5, 3, 64), torch.randn(5, 1, 64)
    cos, sin = hf.DeepseekV3RotaryEmbedding(config)(q, positions[None])
    rotate = hf.apply_rotary_pos_emb_interleave if interleave else hf.apply_rotary_pos_emb
    ref_q, ref_k = rotate(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    got_q, got_k = ours(positions, q, k)
    expected = torch.einsum("bhtd,bhsd->hts", ref_q, ref_k.expand_as(ref_q))
    assert torch.allclose(torch.einsum("thd,shd->hts", got_q, got_k.expand_as(got_q)), expected, atol=1e-4)
    assert softmax_scale(cfg, 192) == pytest.approx(hf.yarn_apply_mscale(config.rope_parameters, 192**-0.5))


def test_absorbed_attention_through_the_engine_gives_transformers_tokens(tiny_model):
    """The GPU's arithmetic (W_UK into the query, attention over the latent rows, W_UV on the output) on the
    CPU with the kernel's torch reference, chunked and preempted: the same greedy tokens."""
    prompts, expected = reference(tiny_model, "deepseek_v3")
    llm_args = dict(max_model_len=128, max_num_batched_tokens=7, enable_prefix_caching=False)
    llm = LLM(str(tiny_model("deepseek_v3")), dtype="float32", num_kv_blocks=36, block_size=4, **llm_args)
    attention = [m for m in llm.runner.model.modules() if isinstance(m, MlaAttention)]
    assert len(attention) == 3
    for layer in attention:
        layer.absorb = True
    assert token_ids(llm.generate(prompts, GREEDY)) == expected
    assert llm.engine.stats().num_preemptions > 0


def test_the_cache_holds_one_latent_row_per_token(tiny_model):
    llm = LLM(str(tiny_model("deepseek_v2")), dtype="float32", num_kv_blocks=10, block_size=4, max_model_len=40)
    runner = llm.runner
    assert [tuple(c.shape) for c in runner.kv_caches] == [(1, 10, 4, 1, 32 + 8)] * 3
    # 3 layers x 4 tokens x 40 values x 4 bytes, where full heads would hold 2 x 4 heads x 24 (k) / 16 (v) values
    assert runner.bytes_per_block() == 3 * 4 * 40 * 4


@pytest.mark.parametrize("name", ["deepseek_v3", "glm4_moe"])
def test_multi_token_prediction_layer_is_skipped(tiny_model, tmp_path, name):
    """DeepSeek-V3 and GLM-4.5 checkpoints carry `model.layers.<num_hidden_layers>.*` for speculative decoding."""
    folder = tmp_path / name
    shutil.copytree(tiny_model(name), folder)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors |= {k.replace("layers.2.", "layers.3."): v.clone() for k, v in tensors.items() if "layers.2." in k}
    tensors["model.layers.3.eh_proj.weight"] = torch.zeros(64, 128)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    out = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    assert token_ids(out) == token_ids(
        LLM(str(tiny_model(name)), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    )


def test_glm45_keys_left_out_take_transformers_defaults(tiny_model, tmp_path):
    """GLM-4.5's config class defaults norm_topk_prob, n_shared_experts and first_k_dense_replace to True,
    1 and 1 (DeepSeek's to False, 0 and 0): a config.json without them is the same model (the tiny one sets
    exactly those values)."""
    folder = tmp_path / "glm"
    shutil.copytree(tiny_model("glm4_moe"), folder)
    config = json.loads((folder / "config.json").read_text())
    for key in ("norm_topk_prob", "n_shared_experts", "first_k_dense_replace"):
        config.pop(key)
    (folder / "config.json").write_text(json.dumps(config))
    out = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    assert token_ids(out) == token_ids(
        LLM(str(tiny_model("glm4_moe")), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("kv_lora_rank"), "'kv_lora_rank' must be a positive integer"),
        (lambda c: c.update(n_group=3), "cannot form n_group 3 equal groups"),
        (lambda c: c.update(topk_group=5), "topk_group must be at most n_group"),
        (lambda c: c.update(rope_parameters={"rope_type": "dynamic", "factor": 2.0}), "rope_type 'dynamic'"),
        (lambda c: c.update(mlp_bias=True), "mlp_bias is not supported"),
    ],
)
def test_config_errors_say_what_is_wrong(tiny_model, tmp_path, edit, message):
    folder = tmp_path / "bad"
    shutil.copytree(tiny_model("deepseek_v3"), folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_block_fp8_release_with_quantized_latent_projections_is_refused(tiny_model, tmp_path):
    folder = tmp_path / "fp8"
    shutil.copytree(tiny_model("deepseek_v3"), folder)
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    config = json.loads((folder / "config.json").read_text()) | {"quantization_config": qc}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="latent-attention projections kv_a_proj_with_mqa, kv_b_proj, q_a_proj"):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_v2_topk_method_outside_the_two_is_refused(tiny_model, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(tiny_model("deepseek_v2"), folder)
    config = json.loads((folder / "config.json").read_text()) | {"topk_method": "noaux_tc"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="topk_method 'noaux_tc' is not supported"):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_latent_cache_of_an_fp8_kv_cache_dtype_generates(tiny_model):
    """Rows stored in e4m3 and read back: the continuation starts as the float cache's does."""
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)
    prompts = [[5, 6, 7, 8], list(range(40, 70))]
    exact = LLM(str(tiny_model("deepseek_v2")), dtype="float32", kv_cache_memory=1 << 22).generate(prompts, params)
    llm = LLM(str(tiny_model("deepseek_v2")), dtype="float32", kv_cache_dtype="fp8", kv_cache_memory=1 << 22)
    assert llm.runner.kv_caches[0].dtype == torch.float8_e4m3fn
    for a, b in zip(llm.generate(prompts, params), exact):
        assert a.outputs[0].token_ids[:2] == b.outputs[0].token_ids[:2]
        first = a.outputs[0].token_ids[0]
        assert a.outputs[0].logprobs[0].top[first] == pytest.approx(b.outputs[0].logprobs[0].top[first], abs=0.1)
