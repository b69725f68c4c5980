"""Qwen2: the Llama decoder with a bias on the q, k and v projections."""

from __future__ import annotations

from model_optimizer.models.llama import DecoderAttention, DecoderLayer, DecoderModel, LlamaForCausalLM


class Qwen2Attention(DecoderAttention):
    qkv_bias = True


class Qwen2Layer(DecoderLayer):
    attention_cls = Qwen2Attention


class Qwen2Model(DecoderModel):
    layer_cls = Qwen2Layer


class Qwen2ForCausalLM(LlamaForCausalLM):
    model_cls = Qwen2Model
