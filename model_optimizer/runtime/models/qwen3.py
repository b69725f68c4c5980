"""Qwen3: the Llama decoder with RMSNorm on each head's queries and keys before rotary."""

from __future__ import annotations

from dataclasses import replace

from model_optimizer.runtime.models.llama import LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs


class Qwen3ForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        super().__init__(replace(args, qk_norm=True))
