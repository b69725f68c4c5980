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


def resolve_model_class(architecture: str) -> type[nn.Module]:
    if architecture not in ARCHITECTURES:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise ValueError(f"architecture {architecture!r} is not supported; supported: {supported}")
    module_name, class_name = ARCHITECTURES[architecture]
    module = importlib.import_module(f"model_optimizer.models.{module_name}")
    return getattr(module, class_name)
