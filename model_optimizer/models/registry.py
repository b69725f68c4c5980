"""Map config.json `architectures` names to model classes, imported on demand."""

from __future__ import annotations

import importlib

from torch import nn

ARCHITECTURES: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
}


MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
}
"""config.json `model_type` -> the architecture assumed when a config has no `architectures` list."""


def supported_architectures() -> list[str]:
    """Every architecture some command loads: the decoders here and the encoders of models/bert.py."""
    from model_optimizer.models.bert import ENCODER_ARCHITECTURES

    return sorted(set(ARCHITECTURES) | set(ENCODER_ARCHITECTURES))


def resolve_model_class(architecture: str) -> type[nn.Module]:
    if architecture not in ARCHITECTURES:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise ValueError(
            f"architecture {architecture!r} is not supported for generation; supported: {supported} "
            "(embedding models may also be BERT-family encoders)"
        )
    module_name, class_name = ARCHITECTURES[architecture]
    module = importlib.import_module(f"model_optimizer.models.{module_name}")
    return getattr(module, class_name)
