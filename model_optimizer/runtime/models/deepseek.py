"""DeepSeek-V2 and DeepSeek-V3 (V2-Lite, V2.5, V3, R1 and their shapes): multi-head latent attention
and a mixture of shared and routed experts. GLM-4.7-Flash is V3's model under GLM's defaults and layer plan
(models/glm4_moe_lite.py).

A layer is the Llama layer's pre-norm residual block with two other parts:
- attention (`MlaSelfAttention`, checkpoint `self_attn`): queries from `q_proj`, or from the low-rank
  pair `q_a_proj` -> `q_a_layernorm` -> `q_b_proj` when `q_lora_rank` is set; each head's query is
  qk_nope_head_dim values without position and qk_rope_head_dim rotated ones. `kv_a_proj_with_mqa`
  gives the compressed KV (kv_lora_rank values, normed by `kv_a_layernorm`) and one rope key shared
  by all heads: together the row the paged cache stores per token (models/mla_args.py). `kv_b_proj`
  turns the compressed KV into every head's k_nope and value (layers/mla.py: up-projected on the
  CPU, absorbed into the query and the output on the GPU). The softmax scale has DeepSeek's YaRN
  correction (layers/yarn_rotary.py);
- feed-forward: a dense MLP in the first `first_k_dense_replace` layers (and off the `moe_layer_freq`
  stride), elsewhere routed experts plus shared experts (models/deepseek_moe.py).

Tensor parallelism: each rank keeps num_heads / N heads (their rows of q_proj / q_b_proj and
kv_b_proj, their columns of o_proj); the compressing projections and their norms are replicated, so
every rank computes, and caches, the same latent rows: MLA's cache is per token, not per head, and
does not shrink with N. Experts are sliced or placed whole as layers/moe.py says. A DeepSeek-V3
checkpoint's multi-token-prediction layers (`model.layers.<num_hidden_layers and up>`) are skipped.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from model_optimizer.runtime.distributed import get_tp
from model_optimizer.runtime.layers.attention import AttentionMetadata
from model_optimizer.runtime.layers.linear import MergedLinear, RowParallelLinear
from model_optimizer.runtime.layers.mla import LatentLinear, MlaAttention
from model_optimizer.runtime.layers.moe import expert_stacked_params
from model_optimizer.runtime.layers.norm import RMSNorm
from model_optimizer.runtime.layers.yarn_rotary import LatentRotary, softmax_scale
from model_optimizer.runtime.models.deepseek_moe import deepseek_moe_args, deepseek_moe_block
from model_optimizer.runtime.models.llama import DecoderLayer, DecoderMLP, LlamaForCausalLM
from model_optimizer.runtime.models.mla_args import MlaArgs
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import is_sparse_layer

LAYER_INDEX = re.compile(r"^model\.layers\.(\d+)\.")
LATENT_NORM_EPS = 1e-6
"""Epsilon of q_a_layernorm and kv_a_layernorm: DeepSeek's own code and transformers build them with their
RMSNorm's default, not `rms_norm_eps` (the same number in every published config, 1e-6)."""


def after_last_layer(name: str, num_layers: int) -> bool:
    """Whether checkpoint tensor `name` belongs to a layer past the model's last (`model.layers.<n>.` with
    n >= num_layers): the multi-token-prediction layers DeepSeek-V3 and GLM-4.5 / 4.7-Flash checkpoints carry."""
    match = LAYER_INDEX.match(name)
    return match is not None and int(match.group(1)) >= num_layers


def unused_checkpoint_key(name: str, num_layers: int, num_shared_experts: int) -> bool:
    """Whether checkpoint tensor `name` is one generation does not use: a layer past the last (`after_last_layer`),
    or a shared expert of no width (with n_shared_experts 0 transformers saves empty shared-expert tensors)."""
    return after_last_layer(name, num_layers) or (num_shared_experts == 0 and ".mlp.shared_experts." in name)


def refuse_quantized_latent_projections(hf: dict, mla: MlaArgs) -> None:
    """The latent projections load in the model dtype only (layers/mla.py's LatentLinear): a pre-quantized
    checkpoint that rounded them (DeepSeek-V3's block-fp8 release, llm-compressor folders that ignore only
    the routers) is refused in words rather than at its first unknown tensor."""
    qc = hf.get("quantization_config")
    if not qc:
        return
    from model_optimizer.runtime.layers.quantization.spec import spec_from_config

    spec = spec_from_config(qc)
    names = ["kv_a_proj_with_mqa", "kv_b_proj"] + (["q_a_proj"] if mla.q_lora_rank else [])
    rounded = [n for n in names if spec.quantizes([f"model.layers.0.self_attn.{n}"])]
    if rounded:
        raise ValueError(
            f"this checkpoint's quantization ({spec.method}, {spec.source} layout) covers the latent-attention "
            f"projections {', '.join(rounded)}, which load only unquantized; use the bf16 checkpoint, with "
            "--quantization fp8 or int8 to round the other layers at load time"
        )


class MlaSelfAttention(nn.Module):
    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: LatentRotary) -> None:
        super().__init__()
        mla = MlaArgs.from_hf(args.hf)
        first_head, self.num_heads = get_tp().shard(mla.num_heads, "num_attention_heads")
        self.mla, self.rotary = mla, rotary
        bias = args.attention_bias  # on the compressing projections and o_proj, as transformers puts it
        if mla.q_lora_rank is None:
            self.q_proj = MergedLinear(args.hidden_size, {"q": mla.num_heads * mla.qk_head_dim})
        else:
            self.q_a_proj = LatentLinear(args.hidden_size, mla.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = MergedLinear(mla.q_lora_rank, {"q": mla.num_heads * mla.qk_head_dim})
        self.kv_a_proj_with_mqa = LatentLinear(args.hidden_size, mla.latent_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, LATENT_NORM_EPS)
        per_head = mla.qk_nope_head_dim + mla.v_head_dim
        self.kv_b_proj = LatentLinear(
            mla.kv_lora_rank, mla.num_heads * per_head, rows=(first_head * per_head, self.num_heads * per_head)
        )
        self.o_proj = RowParallelLinear(mla.num_heads * mla.v_head_dim, args.hidden_size, bias=bias)
        self.attn = MlaAttention(layer_idx, self.num_heads, mla, softmax_scale(args.hf, mla.qk_head_dim))

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        mla = self.mla
        if mla.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))[0])
        q = q.view(-1, self.num_heads, mla.qk_head_dim)  # (tokens, heads, qk_nope + qk_rope)
        q_nope, q_pe = q.split([mla.qk_nope_head_dim, mla.qk_rope_head_dim], dim=-1)
        compressed, k_pe = self.kv_a_proj_with_mqa(x).split([mla.kv_lora_rank, mla.qk_rope_head_dim], dim=-1)
        compressed = self.kv_a_layernorm(compressed)[0]  # (tokens, kv_lora_rank)
        q_pe, k_pe = self.rotary(positions, q_pe, k_pe.unsqueeze(1))  # k_pe: (tokens, 1, qk_rope)
        latent = torch.cat([compressed, k_pe.squeeze(1)], dim=-1)  # the cache row of each new token
        return self.o_proj(self.attn(q_nope, q_pe, latent, self.kv_b_proj.weight, meta))


class DeepseekDecoderLayer(nn.Module):
    forward = DecoderLayer.forward  # pre-norm residual block, as Llama's

    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: LatentRotary) -> None:
        super().__init__()
        self.self_attn = MlaSelfAttention(args, layer_idx, rotary)
        self.mlp = deepseek_moe_block(args) if is_sparse_layer(args.hf, layer_idx) else DecoderMLP(args)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class DeepseekV2ForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        mla, moe = MlaArgs.from_hf(args.hf), deepseek_moe_args(args.hf)  # plain messages before building
        if args.hf.get("mlp_bias"):
            raise ValueError(f"config.json: mlp_bias is not supported for {args.architecture} (no checkpoint has it)")
        refuse_quantized_latent_projections(args.hf, mla)
        rotary = LatentRotary(args.hf, mla.qk_rope_head_dim, args.max_position_embeddings)
        super().__init__(args, DeepseekDecoderLayer, rotary)
        self.mla, self.num_shared_experts = mla, moe.num_shared_experts
        self.local_num_kv_heads = 1  # one latent row per token, whatever the heads (kv_cache_shape)
        self.stacked_params = {
            **expert_stacked_params(moe.num_experts),
            # column-parallel projections of one part: the name stays, the shard id routes the rows
            ".q_proj.": (".q_proj.", "q"),
            ".q_b_proj.": (".q_b_proj.", "q"),
            ".gate_proj.": (".gate_up_proj.", "gate"),
            ".up_proj.": (".gate_up_proj.", "up"),
        }

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        """One layer's paged cache: the latent row per token (kernels/mla_reference.py)."""
        return (1, num_blocks, block_size, 1, self.mla.latent_dim)

    def skips_checkpoint_key(self, name: str) -> bool:
        """DeepSeek-V3's multi-token-prediction layers (after the last decoder layer) and empty shared experts."""
        return unused_checkpoint_key(name, self.args.num_layers, self.num_shared_experts)


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    """V3's sigmoid routing with a correction bias and optional halves-layout rope (models/deepseek_moe.py,
    layers/yarn_rotary.py): the rest is V2's."""
