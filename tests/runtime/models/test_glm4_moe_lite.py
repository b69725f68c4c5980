"""GLM-4.7-Flash (`Glm4MoeLiteForCausalLM`) against transformers on the same tiny random weights (conftest's
`glm4_moe_lite`: a dense first layer, then V3 routing in one group beside a shared expert; values wider than the
no-rope key part, as the release's 256 / 192): float32 greedy tokens and logprobs with q_lora_rank or without,
an explicit `mlp_layer_types`, YaRN in halves, a release-style config.json (its keys left out take GLM's
defaults), prefix-cache hits, chunked prefill with preemption (the CPU's up-projected attention and the GPU's
absorbed one), two ranks; the multi-token-prediction layer skipped, `mopt quantize` int8, `mopt inspect`, the
memory plan and the tuner's cost model at the release's shapes (benchmarks/configs/glm-4.7-flash)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from model_optimizer.model.inspect.consumption import build_meta_model
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.layers.mla import MlaAttention
from model_optimizer.runtime.layers.moe import SparseMoeBlock
from model_optimizer.runtime.models.deepseek_moe import DeepseekV3Router
from model_optimizer.runtime.models.family_defaults import GLM4_MOE_LITE as DEFAULTS
from model_optimizer.runtime.models.glm4_moe_lite import glm4_moe_lite_config
from model_optimizer.runtime.models.loader import load_model
from tests import tiny_checkpoints as tiny
from tests.conftest import TINY_MODELS, YARN
from tests.runtime.models.test_families_engine import GREEDY, reference, token_ids
from tests.runtime.models.test_matches_transformers import NUM_NEW, TOP_K, assert_matches_transformers, prompts

NAME = "glm4_moe_lite"
RELEASE = Path(__file__).resolve().parents[3] / "benchmarks" / "configs" / "glm-4.7-flash"
CPU = torch.device("cpu")


def _checkpoint(tiny_model, folder: Path, **overrides) -> Path:
    """The tiny GLM-4.7-Flash's config with `overrides`, saved by transformers, with the shared tokenizer."""
    kind, settings = TINY_MODELS[NAME]
    return tiny.checkpoint_variant(folder, kind, tiny_model(NAME), **(settings | overrides))


def _assert_matches(folder: Path, seed: int = 3) -> LLM:
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    batch = prompts(llm.runner.vocab_size, seed=seed)
    outputs = llm.generate(batch, SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K))
    assert_matches_transformers(folder, batch, outputs)
    return llm


def _layers(llm: LLM):
    return llm.runner.model.model.layers


def test_default_matches_transformers_and_is_built_as_deepseek_v3(tiny_model):
    """The tiny GLM-4.7-Flash: V3's router (sigmoid with the correction bias), its latent attention, a dense first
    layer then experts; the rope pairs interleaved and GLM's routed_scaling_factor."""
    llm = _assert_matches(tiny_model(NAME))
    layers = _layers(llm)
    assert [isinstance(layer.mlp, SparseMoeBlock) for layer in layers] == [False, True, True, True]
    router = layers[1].mlp.gate
    assert isinstance(router, DeepseekV3Router) and router.routed_scaling_factor == 1.8 and router.renormalize
    assert layers[0].self_attn.rotary.interleaved
    assert [tuple(c.shape) for c in llm.runner.kv_caches][0][-1] == 32 + 8  # one latent row per token


def test_without_q_lora_rank_matches_transformers(tiny_model, tmp_path):
    """q_lora_rank null: one q_proj instead of the q_a_proj / q_a_layernorm / q_b_proj pair."""
    llm = _assert_matches(_checkpoint(tiny_model, tmp_path / "no_q_lora", q_lora_rank=None), seed=5)
    attention = _layers(llm)[0].self_attn
    assert hasattr(attention, "q_proj") and not hasattr(attention, "q_a_proj")


def test_mlp_layer_types_place_the_experts_and_first_k_dense_replace_is_not_read(tiny_model, tmp_path):
    """transformers' Glm4MoeLite reads only mlp_layer_types (a first_k_dense_replace of 3 would make layers 0-2
    dense); with groups of experts (n_group 4, topk_group 2) and no renormalizing, other routing settings."""
    folder = _checkpoint(
        tiny_model,
        tmp_path / "layer_types",
        mlp_layer_types=["sparse", "dense", "sparse", "dense"],
        first_k_dense_replace=3,
        n_group=4,
        topk_group=2,
        norm_topk_prob=False,
    )
    llm = _assert_matches(folder, seed=7)
    assert [isinstance(layer.mlp, SparseMoeBlock) for layer in _layers(llm)] == [True, False, True, False]


def test_yarn_in_halves_matches_transformers(tiny_model, tmp_path):
    """A YaRN rope with DeepSeek's mscale_all_dim softmax correction, the rope part in halves (rope_interleave
    false): transformers' Glm4MoeLite applies both as DeepseekV3 does."""
    rope = YARN | {"mscale": 1.0, "mscale_all_dim": 1.0}
    folder = _checkpoint(tiny_model, tmp_path / "yarn_halves", rope_parameters=rope, rope_interleave=False)
    llm = _assert_matches(folder, seed=9)
    assert not _layers(llm)[0].self_attn.rotary.interleaved


def test_a_release_style_config_takes_glms_defaults(tiny_model, tmp_path):
    """config.json as GLM-4.7-Flash ships it (a flat rope_theta, rope_scaling null, partial_rotary_factor 1.0,
    topk_method noaux_tc, num_nextn_predict_layers, no mlp_layer_types) with the keys the tiny model sets at
    GLM's defaults left out: transformers' Glm4MoeLiteConfig fills them in, and so do we."""
    folder = tmp_path / "release_style"
    shutil.copytree(tiny_model(NAME), folder)
    tiny.edit_config(
        folder,
        drop=("rope_parameters", "mlp_layer_types", "n_shared_experts", "n_group", "topk_group", "norm_topk_prob")
        + ("routed_scaling_factor", "rope_interleave", "rms_norm_eps"),
        rope_theta=50_000.0,
        rope_scaling=None,
        partial_rotary_factor=1.0,
        topk_method="noaux_tc",
        num_nextn_predict_layers=1,
    )
    llm = _assert_matches(folder, seed=11)
    assert llm.runner.args.rms_norm_eps == 1e-5
    assert [isinstance(layer.mlp, SparseMoeBlock) for layer in _layers(llm)] == [False, True, True, True]


@pytest.mark.slow
def test_greedy_matches_transformers_at_the_release_attention_widths(tmp_path):
    """The release's config.json (20 heads, q_lora_rank 768, kv_lora_rank 512, no-rope 192 / rope 64 / values
    256, theta 1e6), but 2 layers, 8 narrow experts and the test vocabulary: tokens identical, logprobs within 1e-4."""
    import transformers

    small = dict(num_hidden_layers=2, intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8)
    ids = dict(vocab_size=tiny.TOKENIZER_VOCAB + 8, torch_dtype="float32", eos_token_id=2, pad_token_id=0)
    config = json.loads((RELEASE / "config.json").read_text()) | small | ids
    folder = tiny.build_checkpoint(tmp_path / "release_widths", transformers.AutoConfig.for_model(**config), 47, False)
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 26, max_model_len=512, skip_tokenizer_init=True)
    batch = prompts(llm.runner.vocab_size, seed=13)[:3]
    params = SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K)
    outputs = llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)
    assert_matches_transformers(folder, batch, outputs)


def test_defaults_are_transformers_own():
    """DEFAULTS against Glm4MoeLiteConfig's (GLM-4.7-Flash's shapes); an explicit null q_lora_rank is kept."""
    from transformers import Glm4MoeLiteConfig

    theirs = Glm4MoeLiteConfig()
    assert {key: getattr(theirs, key) for key in DEFAULTS} == DEFAULTS
    assert theirs.mlp_layer_types == ["dense"] + ["sparse"] * 46 and theirs.rope_interleave is True
    assert glm4_moe_lite_config({"q_lora_rank": None, "num_hidden_layers": 2})["q_lora_rank"] is None


def test_prefix_cache_hits_give_transformers_outputs(tiny_model):
    prompts_, expected = reference(tiny_model, NAME)
    llm = LLM(str(tiny_model(NAME)), dtype="float32", kv_cache_memory=1 << 24, block_size=4, max_num_seqs=1)
    outputs = llm.generate(prompts_, GREEDY)
    assert token_ids(outputs) == expected
    assert all(o.num_cached_tokens >= 20 for o in outputs[1:])
    assert llm.engine.stats().prefix_cache_hits >= 5 * 20


@pytest.mark.parametrize("absorb", [False, True], ids=["up_projected", "absorbed"])
def test_chunked_prefill_and_preemption_give_transformers_outputs(tiny_model, absorb):
    """Chunks of 7 tokens and 36 blocks of 4 for six prompts: preempted and recomputed; with the GPU's absorbed
    arithmetic (W_UK into the query, W_UV on the output) run by the kernel's torch reference too."""
    prompts_, expected = reference(tiny_model, NAME)
    llm_args = dict(max_model_len=128, max_num_batched_tokens=7, enable_prefix_caching=False)
    llm = LLM(str(tiny_model(NAME)), dtype="float32", num_kv_blocks=36, block_size=4, **llm_args)
    attention = [m for m in llm.runner.model.modules() if isinstance(m, MlaAttention)]
    assert len(attention) == 4
    for layer in attention:
        layer.absorb = absorb
    assert token_ids(llm.generate(prompts_, GREEDY)) == expected
    stats = llm.engine.stats()
    assert stats.num_preemptions > 0 and stats.num_free_blocks == 36


@pytest.mark.slow  # starts tensor-parallel worker processes
@pytest.mark.parametrize("expert_parallel", [False, True], ids=["tp", "ep"])
def test_two_ranks_match_one(tiny_model, expert_parallel):
    """The heads split (the latent rows replicated), experts sliced or placed whole, the shared expert and the
    dense layer sliced: the same greedy tokens as one process."""
    from tests.runtime.executor.test_tp_engine import ENGINE, PROMPTS
    from tests.runtime.executor.test_tp_engine import GREEDY as TP_GREEDY

    folder = str(tiny_model(NAME))
    expected = token_ids(LLM(folder, **ENGINE).generate(PROMPTS, TP_GREEDY))
    llm = LLM(folder, tensor_parallel_size=2, enable_expert_parallel=expert_parallel, **ENGINE)
    try:
        assert token_ids(llm.generate(PROMPTS, TP_GREEDY)) == expected
        assert llm.engine.stats().num_preemptions > 0
    finally:
        llm.close()


def test_multi_token_prediction_layer_is_skipped(tiny_model, tmp_path):
    """GLM-4.7-Flash ships `model.layers.<num_hidden_layers>.*` (num_nextn_predict_layers 1) for speculative
    decoding: left unread, the same tokens."""
    folder = tmp_path / "mtp"
    shutil.copytree(tiny_model(NAME), folder)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors |= {k.replace("layers.3.", "layers.4."): v.clone() for k, v in tensors.items() if "layers.3." in k}
    tensors |= {f"model.layers.4.{n}.weight": torch.ones(64) for n in ("enorm", "hnorm", "shared_head.norm")}
    tensors["model.layers.4.eh_proj.weight"] = torch.zeros(64, 128)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tiny.edit_config(folder, num_nextn_predict_layers=1)
    prompt = [[5, 6, 7, 8, 9]]
    out = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22).generate(prompt, GREEDY)
    plain = LLM(str(tiny_model(NAME)), dtype="float32", kv_cache_memory=1 << 22).generate(prompt, GREEDY)
    assert token_ids(out) == token_ids(plain)


def test_a_config_without_architectures_is_read_by_its_model_type(tiny_model, tmp_path):
    folder = tmp_path / "model_type"
    shutil.copytree(tiny_model(NAME), folder)
    tiny.edit_config(folder, drop=("architectures",))
    out = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    plain = LLM(str(tiny_model(NAME)), dtype="float32", kv_cache_memory=1 << 22).generate([[5, 6, 7]], GREEDY)
    assert token_ids(out) == token_ids(plain)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(partial_rotary_factor=0.5), "partial_rotary_factor 0.5 is not supported for Glm4MoeLiteForCausalLM"),
        (dict(mlp_layer_types=["dense", "sparse"]), "'mlp_layer_types' must list 'dense' or 'sparse' for each of"),
        (dict(mlp_layer_types=["dense", "moe", "sparse", "sparse"]), "'mlp_layer_types' must list"),
        (dict(n_group=3), "cannot form n_group 3 equal groups"),
    ],
)
def test_config_errors_say_what_is_wrong(tiny_model, tmp_path, changes, message):
    folder = tmp_path / "bad"
    shutil.copytree(tiny_model(NAME), folder)
    tiny.edit_config(folder, **changes)
    with pytest.raises(ValueError, match=message):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_mopt_quantize_int8_keeps_latent_projections_and_routers_in_float(tiny_model, tmp_path):
    """`mopt quantize --method int8`: queries, o_proj and the MLPs rounded; q_a_proj, kv_a_proj_with_mqa,
    kv_b_proj and the routers left as they were; the engine serves the folder."""
    out = tmp_path / "int8"
    small = ["--num-eval-samples", "2", "--eval-seq-len", "64", "--device", "cpu"]
    assert main(["quantize", str(tiny_model(NAME)), "--method", "int8", "--output", str(out), *small]) == 0
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    mla = ["re:.*\\.q_a_proj$", "re:.*\\.kv_a_proj_with_mqa$", "re:.*\\.kv_b_proj$"]
    assert config["ignore"] == ["lm_head", "re:.*\\.experts(\\..*)?$", "re:.*\\.gate$"] + mla
    written = load_file(str(out / "model.safetensors"))
    original = load_file(str(tiny_model(NAME) / "model.safetensors"))
    quantized = {n.removesuffix(".weight_packed") for n in written if n.endswith(".weight_packed")}
    assert {n.rsplit(".", 1)[-1] for n in quantized} == {"q_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    for key in original:
        if key.removesuffix(".weight") not in quantized:
            assert torch.equal(written[key], original[key]), key
    llm = LLM(str(out), dtype="float32", kv_cache_memory=1 << 22)
    assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True))[0].outputs[0].token_ids) == 4


def test_mopt_inspect_census_and_plan_agree_with_the_engine(tiny_model):
    folder = tiny_model(NAME)
    report = inspect_checkpoint(folder)
    assert report.raw_check.loads and report.exit_code == 0
    assert not [f.title for f in report.findings if f.severity in ("warn", "error")]
    assert {f.id: f.title for f in report.findings}["rope.supported"] == "rope type default, theta 50000"
    moe = report.census.experts
    assert (moe.num_experts, moe.num_moe_layers, moe.experts_per_token) == (8, 3, 2)  # layer 0 is dense
    config = json.loads((folder / "config.json").read_text())
    plan = plan_memory(config, engine=EngineConfig(dtype="float32", block_size=4))
    assert plan.num_active_params == moe.active_params
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22, block_size=4)
    assert plan.num_params == sum(p.numel() for p in llm.runner.model.parameters()) == report.census.total.params
    assert plan.bytes_per_block["auto"] == llm.runner.bytes_per_block() == 4 * 4 * (32 + 8) * 4
    assert model_cost(config).num_params == pytest.approx(plan.num_params, rel=0.01)  # less the norms


def test_the_release_config_builds_at_its_published_size():
    """benchmarks/configs/glm-4.7-flash (zai-org/GLM-4.7-Flash's config.json): the engine's model on meta, the
    memory plan and transformers' own model count the same 29.9 B parameters ("30B-A3B": about 3.3 B active
    without the embeddings), one 576-value latent row per token and layer, and the full 202,752 context."""
    from tests.runtime.models.real_configs import checkpoint_tensors

    config = json.loads((RELEASE / "config.json").read_text())
    plan, cost, model = plan_memory(config), model_cost(config), build_meta_model(config)
    assert plan.num_params == sum(p.numel() for p in model.parameters())
    assert plan.num_params == sum(torch.Size(s).numel() for s in checkpoint_tensors(config).values())
    assert 29.8e9 < plan.num_params < 30.1e9
    embeddings = 2 * 154880 * 2048
    assert 3.1e9 < plan.num_active_params - embeddings < 3.4e9
    assert cost.num_params == pytest.approx(plan.num_params, rel=1e-3)
    assert plan.kv_bytes_per_token == cost.kv_bytes_per_token == {"auto": 47 * 576 * 2, "fp8": 47 * 576}
    assert model.args.max_position_embeddings == plan.max_model_len == 202752
    assert [isinstance(layer.mlp, SparseMoeBlock) for layer in model.model.layers] == [False] + [True] * 46
    bare = {k: v for k, v in config.items() if k not in DEFAULTS}  # the keys transformers defaults, left out
    assert dataclasses.astuple(model_cost(bare)) == dataclasses.astuple(cost)
    assert plan_memory(bare).num_params == plan.num_params


def _release_tensors(config: dict, checkpoint_tensors) -> dict[str, tuple[int, ...]]:
    """The release's safetensors names and shapes: transformers' model (`checkpoint_tensors`) with its fused
    experts written one expert at a time (as save_pretrained and the release do), and the multi-token-prediction
    layer after the last."""
    tensors: dict[str, tuple[int, ...]] = {}
    for name, shape in checkpoint_tensors(config).items():
        prefix = name.rsplit(".", 1)[0]
        if name.endswith(".experts.gate_up_proj"):
            for e in range(shape[0]):
                for part in ("gate_proj", "up_proj"):
                    tensors[f"{prefix}.{e}.{part}.weight"] = (shape[1] // 2, shape[2])
        elif name.endswith(".experts.down_proj"):
            tensors |= {f"{prefix}.{e}.down_proj.weight": shape[1:] for e in range(shape[0])}
        else:
            tensors[name] = shape
    last, mtp = f"model.layers.{config['num_hidden_layers'] - 1}.", f"model.layers.{config['num_hidden_layers']}."
    tensors |= {k.replace(last, mtp): v for k, v in tensors.items() if k.startswith(last)}
    hidden = config["hidden_size"]
    tensors |= {mtp + "eh_proj.weight": (hidden, 2 * hidden)}
    tensors |= {f"{mtp}{n}.weight": (hidden,) for n in ("enorm", "hnorm", "shared_head.norm")}
    return tensors


def test_inspect_of_the_release_folder_finds_nothing_wrong(tmp_path, monkeypatch):
    """The release's tensors at their shapes (headers only, sharded, per-expert names, the MTP layer 47): every
    tensor maps to the engine's parameters or is the skipped MTP layer; the parameter count is the plan's."""
    from tests.runtime.models import real_configs

    fused = real_configs.checkpoint_tensors
    monkeypatch.setattr(real_configs, "checkpoint_tensors", lambda config: _release_tensors(config, fused))
    config = json.loads((RELEASE / "config.json").read_text())
    report = inspect_checkpoint(real_configs.write_release(tmp_path / "glm-4.7-flash", config))
    assert report.raw_check.loads and report.exit_code == 0, report.raw_check
    assert report.raw_check.num_params == plan_memory(config).num_params
    assert report.raw_check.skipped and all(n.startswith("model.layers.47.") for n in report.raw_check.skipped)
    flagged = {f.id for f in report.findings if f.severity in ("warn", "error")}
    assert flagged <= {"tokenizer.missing", "tokens.pad_is_eos", "chat_template.missing"}, flagged


def test_load_model_applies_glms_epsilon_where_config_json_has_none(tiny_model, tmp_path):
    folder = tmp_path / "no_eps"
    shutil.copytree(tiny_model(NAME), folder)
    tiny.edit_config(folder, drop=("rms_norm_eps",))
    model = load_model(folder, "float32", CPU)
    assert model.args.rms_norm_eps == 1e-5
    assert model.model.layers[0].input_layernorm.eps == 1e-5
