"""config.json of the Gemma 2 and Phi-3 / Phi-4 releases, key for key as they ship (there is no model hub
here): the sizes, ids, rope settings and flags users point `mopt` at. The longrope factor lists have the
releases' lengths (half the rotated width of a head, which transformers checks) but not their values:
smooth ramps, short ones near 1, long ones up to ~60, as the real ones run.

PUBLISHED_PARAMS holds each model's parameter count as its model card states it; `write_release` lays one
out as the release's folder: config.json and sharded safetensors whose headers name transformers' tensors at
their real shapes, the data left as a hole in a sparse file (nothing is written or read but the headers)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

GEMMA2_COMMON = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "final_logit_softcapping": 30.0,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "use_cache": True,
    "vocab_size": 256000,
}

PHI3_COMMON = {
    "architectures": ["Phi3ForCausalLM"],
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_phi3.Phi3Config",
        "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM",
    },
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "model_type": "phi3",
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32064,
}


def longrope(half_width: int, rope_type: str = "longrope") -> dict:
    """Phi-3's rope_scaling: `half_width` short and long factors (the releases' lengths, not their values)."""
    ramp = [i / max(half_width - 1, 1) for i in range(half_width)]
    return {
        "long_factor": [round(1.0 + 59.0 * r**3, 4) for r in ramp],
        "short_factor": [round(1.0 + 0.1 * r**2, 4) for r in ramp],
        "type": rope_type,
    }


PHI3_MINI = PHI3_COMMON | {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32}
PHI3_MINI |= {"num_attention_heads": 32, "num_key_value_heads": 32}
PHI3_LONG = {"max_position_embeddings": 131072, "sliding_window": 262144, "transformers_version": "4.40.2"}

CONFIGS: dict[str, dict] = {
    "gemma-2-2b-it": GEMMA2_COMMON
    | {"eos_token_id": [1, 107], "head_dim": 256, "hidden_size": 2304, "intermediate_size": 9216}
    | {"num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "query_pre_attn_scalar": 256}
    | {"torch_dtype": "float32", "transformers_version": "4.42.4"},
    "gemma-2-9b-it": GEMMA2_COMMON
    | {"eos_token_id": 1, "head_dim": 256, "hidden_size": 3584, "intermediate_size": 14336}
    | {"num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256}
    | {"sliding_window_size": 4096, "torch_dtype": "float32", "transformers_version": "4.42.0.dev0"},
    "gemma-2-27b-it": GEMMA2_COMMON
    | {"eos_token_id": 1, "head_dim": 128, "hidden_size": 4608, "intermediate_size": 36864}
    | {"num_attention_heads": 32, "num_hidden_layers": 46, "num_key_value_heads": 16, "query_pre_attn_scalar": 144}
    | {"sliding_window_size": 4096, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0"},
    "Phi-3-mini-4k-instruct": PHI3_MINI
    | {"attention_bias": False, "max_position_embeddings": 4096, "rope_scaling": None, "sliding_window": 2047}
    | {"transformers_version": "4.40.2"},
    "Phi-3-mini-128k-instruct": PHI3_MINI | PHI3_LONG | {"rope_scaling": longrope(48)},
    "Phi-3.5-mini-instruct": PHI3_MINI | PHI3_LONG | {"rope_scaling": longrope(48), "transformers_version": "4.43.3"},
    "Phi-3-medium-128k-instruct": PHI3_COMMON
    | {"hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40}
    | {"num_attention_heads": 40, "num_key_value_heads": 10, "max_position_embeddings": 131072}
    | {"rope_scaling": longrope(64, "su"), "sliding_window": 131072, "transformers_version": "4.39.3"},
    "phi-4": PHI3_COMMON
    | {"attention_bias": False, "bos_token_id": 100257, "eos_token_id": 100265, "pad_token_id": 100349}
    | {"hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40}
    | {"num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352}
    | {"max_position_embeddings": 16384, "original_max_position_embeddings": 16384, "rope_scaling": None}
    | {"rope_theta": 250000, "sliding_window": None, "transformers_version": "4.47.0"},
    "Phi-4-mini-instruct": PHI3_COMMON
    | {"attention_bias": False, "bos_token_id": 199999, "eos_token_id": 199999, "pad_token_id": 199999}
    | {"full_attn_mod": 1, "interpolate_factor": 1, "lm_head_bias": False, "mlp_bias": False}
    | {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "vocab_size": 200064}
    | {"num_attention_heads": 24, "num_key_value_heads": 8, "partial_rotary_factor": 0.75}
    | {"max_position_embeddings": 131072, "rope_scaling": longrope(48), "sliding_window": 262144}
    | {"tie_word_embeddings": True, "transformers_version": "4.45.0"},
}

PUBLISHED_PARAMS = {
    "gemma-2-2b-it": 2.61e9,
    "gemma-2-9b-it": 9.24e9,
    "gemma-2-27b-it": 27.2e9,
    "Phi-3-mini-4k-instruct": 3.82e9,
    "Phi-3-mini-128k-instruct": 3.82e9,
    "Phi-3.5-mini-instruct": 3.82e9,
    "Phi-3-medium-128k-instruct": 14.0e9,
    "phi-4": 14.7e9,
    "Phi-4-mini-instruct": 3.84e9,
}

CONTEXT = {name: 8192 for name in CONFIGS if name.startswith("gemma")} | {
    "Phi-3-mini-4k-instruct": 4096,
    "Phi-3-mini-128k-instruct": 131072,
    "Phi-3.5-mini-instruct": 131072,
    "Phi-3-medium-128k-instruct": 131072,
    "phi-4": 16384,
    "Phi-4-mini-instruct": 131072,
}
"""The context vLLM serves each at by default (its max_model_len)."""

HEADS = {name: (c["num_attention_heads"], c["num_key_value_heads"]) for name, c in CONFIGS.items()}

GENERATION_CONFIGS = {
    "gemma-2-9b-it": {"bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 107], "pad_token_id": 0},
    "Phi-3.5-mini-instruct": {"bos_token_id": 1, "eos_token_id": [32007, 32001, 32000], "pad_token_id": 32000},
    "Phi-4-mini-instruct": {"bos_token_id": 199999, "eos_token_id": [200020, 199999], "pad_token_id": 199999},
}
"""generation_config.json of the releases that ship one with more stop ids than config.json: Gemma 2's
<end_of_turn> (107), Phi-3's <|end|> (32007) and <|assistant|> (32001), Phi-4-mini's <|end|> (200020)."""


def checkpoint_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor the release's safetensors hold: transformers' own model for `config`, built
    on the meta device, without the lm_head a tied model does not save."""
    import torch
    import transformers

    hf_config = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k != "auto_map"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    tensors = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if hf_config.tie_word_embeddings:
        del tensors["lm_head.weight"]
    return tensors


def write_release(folder: Path, config: dict, num_shards: int = 4) -> Path:
    """`folder` as the release ships it: config.json, `num_shards` safetensors and their index."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tensors = checkpoint_tensors(config)
    dtype, size = ("F32", 4) if config.get("torch_dtype") == "float32" else ("BF16", 2)
    names = sorted(tensors)
    weight_map = {}
    for i in range(num_shards):
        file = f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        end = 0
        for name in names[i::num_shards]:
            start, end = end, end + size * math.prod(tensors[name])
            header[name] = {"dtype": dtype, "shape": list(tensors[name]), "data_offsets": [start, end]}
            weight_map[name] = file
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / file, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + end)  # the tensors' bytes: a hole, no disk
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder
