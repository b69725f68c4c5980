"""Config settings a randomized review against transformers found run wrong, or refused without naming the
setting: each is a tiny random checkpoint saved by transformers from its own config class, and our
full-sequence logits (float32, CPU) must equal transformers' eager ones, or the load must fail naming
the setting.

- Qwen2 and Qwen3 slide only the layers from `max_window_layers` on (or those `layer_types` names);
- Llama, GLM-4 and GLM-4.5 have no sliding window: transformers ignores a `sliding_window` key;
- Mistral, Mixtral and Qwen2 read no `attention_bias` (Qwen2's q/k/v bias is always on, o_proj never);
- Llama's `mlp_bias` puts a bias on gate, up and down;
- DeepSeek's latent norms (`q_a_layernorm`, `kv_a_layernorm`) use epsilon 1e-6 whatever `rms_norm_eps` says;
- DeepSeek and GLM-4.5 with `n_shared_experts` 0: transformers saves empty shared-expert tensors;
- an MLP activation other than SiLU is refused by name (it used to run as SiLU).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.layers.attention import AttentionMetadata, kv_cache_shape
from model_optimizer.runtime.models.loader import load_model
from tests.conftest import DEEPSEEK
from tests.tiny_checkpoints import build_checkpoint, tiny_config

_rng = random.Random(0)
PROMPT = [_rng.randrange(3, 1000) for _ in range(40)]
"""Longer than every window below (8), so a window that should not be there changes the logits."""
BLOCK_SIZE = 4
GLM4_MOE = dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, first_k_dense_replace=1)


def checkpoint(tmp_path: Path, kind: str, **overrides) -> Path:
    if overrides.get("n_shared_experts") == 0:
        return empty_shared_experts_checkpoint(tmp_path / kind, tiny_config(kind, **overrides))
    return build_checkpoint(tmp_path / kind, tiny_config(kind, **overrides), with_tokenizer=False)


def empty_shared_experts_checkpoint(out_dir: Path, config) -> Path:
    """Random weights spread as tiny_checkpoints spreads them, but around the empty shared-expert tensors
    transformers builds for n_shared_experts 0 (their width, zero, cannot scale anything)."""
    from transformers import AutoModelForCausalLM

    generator = torch.Generator().manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel():
                spread = torch.randn(param.shape, generator=generator)
                param.copy_(1.0 + 0.1 * spread if "norm" in name else spread / param.shape[-1] ** 0.5)
    model.save_pretrained(str(out_dir))
    return out_dir


def our_logits(model_dir: Path, prompt: list[int]) -> torch.Tensor:
    """(tokens, vocab) logits of one prefill of `prompt` through the loaded model and scratch caches."""
    cpu = torch.device("cpu")
    model = load_model(model_dir, "float32", cpu)
    num_blocks = -(-len(prompt) // BLOCK_SIZE)
    caches = [torch.zeros(kv_cache_shape(model, num_blocks, BLOCK_SIZE)) for _ in range(model.args.num_layers)]
    meta = AttentionMetadata.for_prefill([len(prompt)], BLOCK_SIZE, caches, cpu)
    with torch.inference_mode():
        return model.compute_logits(model(torch.tensor(prompt), torch.arange(len(prompt)), meta))


def reference(model_dir: Path):
    from transformers import AutoModelForCausalLM

    kwargs = {"experts_implementation": "eager"} if "moe" in model_dir.name or "deepseek" in model_dir.name else {}
    return AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", **kwargs
    ).eval()


def their_logits(model_dir: Path, prompt: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return reference(model_dir)(torch.tensor([prompt])).logits[0]


VARIANTS = {
    "qwen2_windows_from_layer_1": ("qwen2", dict(use_sliding_window=True, sliding_window=8, max_window_layers=1)),
    "qwen3_no_layer_past_max_window_layers": (
        "qwen3",
        dict(head_dim=16, use_sliding_window=True, sliding_window=8, max_window_layers=2),
    ),
    "qwen3_layer_types": (
        "qwen3",
        dict(head_dim=16, use_sliding_window=True, sliding_window=8)
        | dict(num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    ),
    "llama_ignores_sliding_window": ("llama", dict(sliding_window=8)),
    "glm4_ignores_sliding_window": ("glm4", dict(head_dim=16, sliding_window=8)),
    "glm4_moe_ignores_sliding_window": ("glm4_moe", GLM4_MOE | dict(head_dim=16, sliding_window=8)),
    "mistral_ignores_attention_bias": ("mistral", dict(attention_bias=True, sliding_window=8)),
    "qwen2_ignores_attention_bias": ("qwen2", dict(attention_bias=True)),
    "llama_mlp_bias": ("llama", dict(mlp_bias=True, attention_bias=True)),
    "deepseek_v2_no_shared_experts": ("deepseek_v2", DEEPSEEK | dict(n_shared_experts=0)),
    "glm4_moe_no_shared_experts": ("glm4_moe", GLM4_MOE | dict(head_dim=16, n_shared_experts=0)),
    "deepseek_v2_latent_norm_eps": ("deepseek_v2", DEEPSEEK | dict(q_lora_rank=24, rms_norm_eps=0.1)),
    "deepseek_v3_latent_norm_eps": (
        "deepseek_v3",
        DEEPSEEK | dict(q_lora_rank=None, n_group=4, topk_group=2, rms_norm_eps=0.1),
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_logits_match_transformers(tmp_path, name):
    kind, overrides = VARIANTS[name]
    model_dir = checkpoint(tmp_path, kind, **overrides)
    ours, theirs = our_logits(model_dir, PROMPT), their_logits(model_dir, PROMPT)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert ours.argmax(-1).tolist() == theirs.argmax(-1).tolist()


def test_qwen2_layer_windows_through_the_engine(tmp_path):
    """The per-layer windows in decode steps and in chunks of a prompt: transformers' greedy tokens."""
    model_dir = checkpoint(tmp_path, "qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    llm = LLM(
        str(model_dir),
        dtype="float32",
        num_kv_blocks=32,
        block_size=BLOCK_SIZE,
        max_model_len=64,
        max_num_batched_tokens=7,
    )
    ours = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    theirs = reference(model_dir).generate(
        torch.tensor([PROMPT]), max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0
    )
    assert ours[0].outputs[0].token_ids == theirs[0, len(PROMPT) :].tolist()


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3", "glm4"])
def test_activation_other_than_silu_is_refused_by_name(tmp_path, kind):
    model_dir = checkpoint(tmp_path, kind, hidden_act="gelu", head_dim=16)
    with pytest.raises(ValueError, match="hidden_act 'gelu'"):
        load_model(model_dir, "float32", torch.device("cpu"))


def test_qwen2_layer_types_of_the_wrong_length_are_refused(tmp_path):
    model_dir = checkpoint(tmp_path, "qwen2", use_sliding_window=True, sliding_window=8)
    config = model_dir / "config.json"
    config.write_text(config.read_text().replace('"full_attention"', '"sliding"', 1))
    with pytest.raises(ValueError, match="layer_types"):
        load_model(model_dir, "float32", torch.device("cpu"))
