"""Map config.json `architectures` names to model classes, imported on demand."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

ARCHITECTURES: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    "MixtralForCausalLM": ("mixtral", "MixtralForCausalLM"),
    "Glm4ForCausalLM": ("glm4", "Glm4ForCausalLM"),
    "Glm4MoeForCausalLM": ("glm4_moe", "Glm4MoeForCausalLM"),
    "Glm4MoeLiteForCausalLM": ("glm4_moe_lite", "Glm4MoeLiteForCausalLM"),
    "Phi3ForCausalLM": ("phi3", "Phi3ForCausalLM"),
    "Gemma3ForCausalLM": ("gemma3", "Gemma3ForCausalLM"),
    "Gemma2ForCausalLM": ("gemma2", "Gemma2ForCausalLM"),
    "GptOssForCausalLM": ("gpt_oss", "GptOssForCausalLM"),
    "DeepseekV2ForCausalLM": ("deepseek", "DeepseekV2ForCausalLM"),
    "DeepseekV3ForCausalLM": ("deepseek", "DeepseekV3ForCausalLM"),
}


ENCODER_ARCHITECTURES = {
    "BertModel": "bert",
    "BertForMaskedLM": "bert",
    "BertForPreTraining": "bert",
    "RobertaModel": "roberta",
    "RobertaForMaskedLM": "roberta",
    "XLMRobertaModel": "roberta",
    "XLMRobertaForMaskedLM": "roberta",
}
"""Encoder architectures (models/bert.py builds them) -> their family. Here, in a module without torch,
so that telling an encoder folder from a decoder one imports none (`mopt serve`'s frontend)."""

MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "glm4": "Glm4ForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    "glm4_moe_lite": "Glm4MoeLiteForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
}
"""config.json `model_type` -> the architecture assumed when a config has no `architectures` list."""

DECODER_BASE_NAMES = {
    "LlamaModel": "LlamaForCausalLM",
    "MistralModel": "MistralForCausalLM",
    "Qwen2Model": "Qwen2ForCausalLM",
    "Qwen3Model": "Qwen3ForCausalLM",
    "Gemma2Model": "Gemma2ForCausalLM",
}
"""Decoders saved without their LM head (embedding checkpoints) -> the class whose body they load into."""


def is_encoder(hf: dict) -> bool:
    """The one place that tells an encoder (BERT family: embeddings only) from a decoder.

    Raises ValueError naming the supported architectures when it is neither."""
    arch = (hf.get("architectures") or [""])[0]
    if arch in ENCODER_ARCHITECTURES:
        return True
    if arch in DECODER_BASE_NAMES or arch in ARCHITECTURES:
        return False
    supported = sorted(set(ENCODER_ARCHITECTURES) | set(DECODER_BASE_NAMES) | set(ARCHITECTURES))
    raise ValueError(f"architecture {arch!r} is not supported for embeddings; supported: {', '.join(supported)}")


def supported_architectures() -> list[str]:
    """Every architecture some command loads: the decoders and the encoders (models/bert.py builds those)."""
    return sorted(set(ARCHITECTURES) | set(ENCODER_ARCHITECTURES))


FAMILIES: dict[str, tuple[str, ...]] = {
    "Llama 2/3/3.1": ("LlamaForCausalLM",),
    "Mistral": ("MistralForCausalLM",),
    "Qwen2": ("Qwen2ForCausalLM",),
    "Qwen3": ("Qwen3ForCausalLM",),
    "Qwen3-MoE": ("Qwen3MoeForCausalLM",),
    "Mixtral": ("MixtralForCausalLM",),
    "GLM-4": ("Glm4ForCausalLM",),
    "GLM-4.5/4.6/4.7 (MoE)": ("Glm4MoeForCausalLM",),
    "GLM-4.7-Flash": ("Glm4MoeLiteForCausalLM",),
    "Phi-3 / Phi-4": ("Phi3ForCausalLM",),
    "Gemma 3 (text)": ("Gemma3ForCausalLM",),
    "Gemma 2": ("Gemma2ForCausalLM",),
    "gpt-oss": ("GptOssForCausalLM",),
    "DeepSeek-V2/V3": ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
}
"""How people name the families of ARCHITECTURES: what an error lists."""

GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "attention_bias": False,
    "tie_word_embeddings": True,
}
"""transformers' Gemma3TextConfig values for the keys a multimodal checkpoint's `text_config` leaves out
(gemma-3-4b-it's names only five)."""

TEXT_OF_MULTIMODAL: dict[str, tuple[str, str, dict]] = {
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "gemma3_text", GEMMA3_TEXT_DEFAULTS),
}
"""Image-and-text architectures whose language model is served alone: -> (its text architecture, model
type, the text config's defaults). Their vision tower is not loaded; prompts are text."""

NOT_YET: dict[str, str] = {}
"""Architectures users try that are not supported, with why."""


def describe_supported() -> str:
    """The families and their `architectures` names, for error messages."""
    return "; ".join(f"{family} ({', '.join(archs)})" for family, archs in FAMILIES.items())


def resolve_model_class(architecture: str) -> type[nn.Module]:
    if architecture not in ARCHITECTURES:
        why = f" ({NOT_YET[architecture]})" if architecture in NOT_YET else ""
        raise ValueError(
            f"architecture {architecture!r} is not supported for generation{why}; supported: {describe_supported()} "
            "(embedding models may also be BERT-family encoders)"
        )
    module_name, class_name = ARCHITECTURES[architecture]
    module = importlib.import_module(f"model_optimizer.runtime.models.{module_name}")
    return getattr(module, class_name)
