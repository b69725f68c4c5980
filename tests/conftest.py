"""Shared fixtures: tiny random checkpoints saved by transformers itself, built once per session."""

from __future__ import annotations

import shutil
import signal
import zlib
from pathlib import Path

import pytest

from tests import tiny_checkpoints as tiny

_TOKENIZER_DIR: Path | None = None

# A run started in the background (`pytest &` in a script) inherits SIGINT ignored, and so would every
# process a test starts (an ignored signal survives exec): the Ctrl-C tests need interruptible children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _tokenizer_files(tmp_root: Path) -> Path:
    global _TOKENIZER_DIR
    if _TOKENIZER_DIR is None:
        _TOKENIZER_DIR = tmp_root / "tokenizer"
        tiny.build_tokenizer(_TOKENIZER_DIR)
    return _TOKENIZER_DIR


DEEPSEEK = (
    dict(num_hidden_layers=3, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8)
    | dict(v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1)
    | dict(first_k_dense_replace=1)
)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "rope_theta": 10000.0} | dict(
    beta_fast=32, beta_slow=1, mscale=0.707, mscale_all_dim=0.707
)

# name -> (kind, overrides): GQA ratios 1, 2, 4; head_dim 32 and 64; tied and untied; odd vocabulary
TINY_MODELS = {
    "llama3": (
        "llama",
        dict(
            num_key_value_heads=1,
            head_dim=16,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            rope_theta=500000.0,
        ),
    ),
    "mistral": ("mistral", dict(num_key_value_heads=2, head_dim=32, sliding_window=4096)),
    "qwen2": ("qwen2", dict(num_key_value_heads=4, tie_word_embeddings=True, vocab_size=1031)),
    "qwen3": ("qwen3", dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)),
    "qwen3_hd64": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=1, head_dim=64, hidden_size=128)),
    # mixtures of experts: renormalized top-k with a dense layer listed; plain top-k every other layer
    "qwen3_moe": (
        "qwen3_moe",
        dict(head_dim=16, num_hidden_layers=3, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
        | dict(norm_topk_prob=True, mlp_only_layers=[1]),
    ),
    "qwen3_moe_step2": (
        "qwen3_moe",
        dict(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=48)
        | dict(decoder_sparse_step=2, tie_word_embeddings=True),
    ),
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=48, sliding_window=24)),
    "glm4": ("glm4", dict(head_dim=32, num_hidden_layers=2)),  # partial rotary 0.5, q/k/v bias by default
    # GLM-4.5: a dense first layer, then DeepSeek-V3 routing (groups, correction bias) beside a shared expert
    "glm4_moe": (
        "glm4_moe",
        dict(head_dim=32, num_hidden_layers=3, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
        | dict(n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.5)
        | dict(attention_bias=True, use_qk_norm=True, norm_topk_prob=True),
    ),
    # Phi-3 / Phi-4: fused qkv and gate_up tensors; Phi-3-mini-4k's sliding window on every layer (scaled down),
    # and Phi-4-mini's rotary on the first 0.75 of each head with tied embeddings (longrope: test_phi3.py)
    "phi3": ("phi3", dict(sliding_window=24, rope_theta=5_000.0)),
    "phi3_partial": (
        "phi3",
        dict(num_key_value_heads=1, head_dim=32, partial_rotary_factor=0.75, tie_word_embeddings=True),
    ),
    "gemma3": (
        "gemma3",
        dict(head_dim=16, num_hidden_layers=3, query_pre_attn_scalar=24, sliding_window=16, tie_word_embeddings=True)
        | dict(layer_types=["sliding_attention", "full_attention", "sliding_attention"], final_logit_softcapping=30.0)
        | dict(
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            }
        ),
    ),
    # Gemma 2: alternating layers by default, one RoPE; attention scores capped at 5 (50 in the releases),
    # low enough that the cap changes the greedy tokens
    "gemma2": (
        "gemma2",
        dict(head_dim=16, num_hidden_layers=3, query_pre_attn_scalar=24, sliding_window=16, rope_theta=5_000.0)
        | dict(attn_logit_softcapping=5.0, final_logit_softcapping=30.0, tie_word_embeddings=True),
    ),
    # multi-head latent attention: V2-Lite's layout (no q_lora_rank, greedy top-k, DeepSeek's YaRN mscale),
    # V2's (q_lora_rank, group-limited greedy, attention bias), V3's (sigmoid, correction bias, groups)
    "deepseek_v2": ("deepseek_v2", DEEPSEEK | dict(q_lora_rank=None, routed_scaling_factor=1.5, rope_parameters=YARN)),
    "deepseek_v2_group": (
        "deepseek_v2",
        DEEPSEEK
        | dict(q_lora_rank=24, topk_method="group_limited_greedy", n_group=4, topk_group=2, attention_bias=True)
        | dict(n_shared_experts=2, first_k_dense_replace=0),
    ),
    "deepseek_v3": (
        "deepseek_v3",
        DEEPSEEK
        | dict(q_lora_rank=24, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5)
        | dict(rope_parameters=YARN | {"mscale": 1.0, "mscale_all_dim": 1.0}),
    ),
    # GLM-4.7-Flash: V3's latent attention and routing at GLM's defaults (one group, interleaved rope, a dense
    # first layer by default mlp_layer_types), values wider than the no-rope key part, as the release's 256 / 192
    "glm4_moe_lite": (
        "glm4_moe_lite",
        DEEPSEEK
        | dict(num_hidden_layers=4, q_lora_rank=24, qk_nope_head_dim=24, v_head_dim=32, rope_theta=50_000.0)
        | dict(routed_scaling_factor=1.8, norm_topk_prob=True),
    ),
    # gpt-oss: sinks, alternating sliding (8) and full layers, YaRN (truncate false), router bias, expert biases,
    # interleaved gate/up and a clamped SwiGLU whose limit (1.5; 7 in the releases) bites at these widths
    "gpt_oss": (
        "gpt_oss",
        dict(head_dim=16, num_hidden_layers=3, num_local_experts=4, num_experts_per_tok=2, intermediate_size=64)
        | dict(sliding_window=8, swiglu_limit=1.5)
        | dict(
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
            | dict(beta_fast=32.0, beta_slow=1.0, truncate=False, rope_theta=150_000.0)
        ),
    ),
}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """Factory: tiny_model(name) -> folder with config.json, model.safetensors and a tokenizer."""
    root = tmp_path_factory.mktemp("models")
    built: dict[str, Path] = {}

    def make(name: str = "qwen3") -> Path:
        if name not in built:
            kind, overrides = TINY_MODELS[name]
            out = root / name
            # crc32, not hash(): str hashes change with every process, and so would the weights
            tiny.build_checkpoint(
                out, tiny.tiny_config(kind, **overrides), seed=zlib.crc32(name.encode()) % 1000, with_tokenizer=False
            )
            for f in _tokenizer_files(root).iterdir():
                shutil.copy(f, out / f.name)
            built[name] = out
        return built[name]

    return make


@pytest.fixture(scope="session")
def no_template_model(tiny_model, tmp_path_factory):
    """A copy of the tiny Qwen3 whose tokenizer has no chat template."""
    import json
    import shutil

    out = tmp_path_factory.mktemp("no_template") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="session")
def qwen3_llm(tiny_model):
    """One engine on the tiny Qwen3, shared by tests that only read its outputs."""
    from model_optimizer import LLM

    return LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 24)


# quantization: every linear input size a multiple of 128, so int4 groups of 128 tile them
QUANT_MODELS = {
    "qwen3": (
        "qwen3",
        dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    ),
    # qkv biases exercise bias slicing of fused shards
    "qwen2": ("qwen2", dict(hidden_size=128, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2)),
}


@pytest.fixture(scope="session")
def quant_model(tmp_path_factory):
    """Factory: quant_model(name) -> folder of a float32 tiny checkpoint with a tokenizer."""
    import transformers

    root = tmp_path_factory.mktemp("quant_models")
    built: dict[str, Path] = {}

    def make(name: str = "qwen3") -> Path:
        if name not in built:
            kind, overrides = QUANT_MODELS[name]
            cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[kind]
            config = cls(
                vocab_size=tiny.TOKENIZER_VOCAB + 8,
                num_hidden_layers=2,
                max_position_embeddings=512,
                tie_word_embeddings=True,
                eos_token_id=2,
                pad_token_id=0,
                **overrides,
            )
            out = root / name
            tiny.build_checkpoint(out, config, seed=3, with_tokenizer=False)
            tok = root / "tokenizer"
            if not tok.is_dir():
                tiny.build_tokenizer(tok)
            for f in tok.iterdir():
                shutil.copy(f, out / f.name)
            built[name] = out
        return built[name]

    return make


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """What mopt measures about this machine (environment/cpu_speed.py) goes to a folder of this session,
    never the user's cache; servers the tests start inherit it."""
    import os

    saved = os.environ.get("MOPT_CACHE_DIR")
    os.environ["MOPT_CACHE_DIR"] = str(tmp_path_factory.mktemp("mopt-cache"))
    yield
    if saved is None:
        os.environ.pop("MOPT_CACHE_DIR", None)
    else:
        os.environ["MOPT_CACHE_DIR"] = saved
