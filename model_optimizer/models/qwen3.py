"""Qwen3: the Llama decoder with RMSNorm on each head's queries and keys before rotary."""

from __future__ import annotations

from model_optimizer.models.llama import DecoderAttention, DecoderLayer, DecoderModel, LlamaForCausalLM


class Qwen3Attention(DecoderAttention):
    qk_norm = True


class Qwen3Layer(DecoderLayer):
    attention_cls = Qwen3Attention


class Qwen3Model(DecoderModel):
    layer_cls = Qwen3Layer


class Qwen3ForCausalLM(LlamaForCausalLM):
    model_cls = Qwen3Model
