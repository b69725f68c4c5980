"""Qwen2: the Llama decoder with a bias on the q, k and v projections."""

from __future__ import annotations

from dataclasses import replace

from model_optimizer.runtime.models.llama import LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs


class Qwen2ForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        super().__init__(replace(args, qkv_bias=True))
