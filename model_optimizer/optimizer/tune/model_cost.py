"""What a model costs per token: its parameters, the weight bytes a step reads, the KV bytes it caches
and the FLOPs attention adds per token of context, from config.json alone (no weights, no torch).

A mixture of experts (runtime/models/moe_args.py) counts its experts in W and L by use: a step reads
the experts its tokens are routed to (each expert is missed by a token with probability 1 - k/E, so a
decode step of b sequences reads a share 1 - (1 - k/E)^b of them) and a token's FLOPs are those of
its k experts: Qwen3-30B-A3B's 30.5 B parameters decode at batch 1 like a 3.3 B model. DeepSeek's
shared experts run for every token. Multi-head latent attention (runtime/models/mla_args.py) caches one
latent row per token and layer (K = layers x (kv_lora_rank + qk_rope_head_dim) values, the same on every
GPU under tensor parallelism) and attends in the absorbed form: 2 x heads x (2 kv_lora_rank +
qk_rope_head_dim) FLOPs per token of context and layer. (W, L and K are the roofline's terms: predictor.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

from model_optimizer.optimizer.tune.collectives import local_kv_heads
from model_optimizer.runtime.models.family_defaults import with_family_defaults
from model_optimizer.runtime.models.mla_args import MlaArgs, mla_args_for
from model_optimizer.runtime.models.model_config import tied_embeddings
from model_optimizer.runtime.models.moe_args import moe_args_for, sparse_layers

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class ModelCost:
    """What a model costs per token, from config.json."""

    num_params: int
    linear_params: int
    """Parameters in matmuls (layers and lm_head): 2 FLOPs each per token."""
    weight_bytes: int
    kv_bytes_per_token: dict[str, int]
    """kv_cache_dtype -> bytes over all layers, K and V."""
    attn_flops_per_ctx_token: int
    """Attention FLOPs per new token per token of context (QK^T and PV)."""
    max_position_embeddings: int
    num_layers: int = 0
    hidden_size: int = 0
    num_heads: int = 0
    num_kv_heads: int = 0
    intermediate_size: int = 0
    """The shape tensor parallelism splits (0: unknown, no check)."""
    expert_params: int = 0
    """Parameters of the experts of a mixture of experts (all layers); 0 for a dense model."""
    expert_fraction: float = 1.0
    """Experts each token runs, over the experts a layer has (top_k / num_experts)."""
    layer_params: int = 0
    """Parameters of the decoder layers (all of them): what weight offload can move to host memory."""

    @property
    def active_linear_params(self) -> float:
        """Matmul parameters one token runs through: the experts it is routed to, not all of them."""
        return self.linear_params - self.expert_params * (1.0 - self.expert_fraction)

    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes a step of `tokens` tokens reads: every dense weight, and of the experts those that
        at least one token is routed to (uniform routing: each expert misses a token with 1 - top_k / E)."""
        if not self.expert_params:
            return float(self.weight_bytes)
        expert_bytes = self.weight_bytes * self.expert_params / self.num_params
        untouched = (1.0 - self.expert_fraction) ** max(tokens, 1.0)
        return self.weight_bytes - expert_bytes * untouched

    def kv_bytes_per_gpu(self, kv_cache_dtype: str, tensor_parallel_size: int) -> int:
        """KV bytes per token one GPU stores: its KV heads' share of the whole."""
        whole = self.kv_bytes_per_token[kv_cache_dtype]
        if tensor_parallel_size <= 1 or not self.num_kv_heads:
            return whole
        return whole // self.num_kv_heads * local_kv_heads(self.num_kv_heads, tensor_parallel_size)


def model_cost(config: dict, dtype: str | None = None) -> ModelCost:
    """Parameter, byte and FLOP counts of a decoder from its config.json (norms are ignored: under 0.1%), with
    the keys it leaves out read as transformers reads them (family_defaults)."""
    config = with_family_defaults(config)
    layers, hidden = int(config["num_hidden_layers"]), int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab, inter = int(config["vocab_size"]), int(config["intermediate_size"])
    q, kv = heads * head_dim, kv_heads * head_dim
    moe, sparse = moe_args_for(config), len(sparse_layers(config))
    experts = moe.num_experts * 3 * hidden * moe.intermediate_size if moe else 0
    router = moe.num_experts * hidden if moe else 0
    shared = moe.num_shared_experts * 3 * hidden * moe.intermediate_size if moe else 0
    mla = mla_args_for(config)
    attention = hidden * q + 2 * hidden * kv + q * hidden
    kv_values, attn_flops = 2 * kv, 4 * layers * q
    if mla is not None:  # the latent row is cached, whatever the heads; a step attends in the absorbed form
        attention = mla_attention_params(mla, hidden)
        kv_values, attn_flops, kv_heads = mla.latent_dim, 2 * layers * heads * (mla.latent_dim + mla.kv_lora_rank), 1
    blocks = layers * attention
    blocks += (layers - sparse) * 3 * hidden * inter + sparse * (experts + router + shared)
    tied = tied_embeddings(config)
    linear = blocks + vocab * hidden  # the lm_head is a matmul whether or not it is tied
    params = blocks + vocab * hidden * (1 if tied else 2)
    elem = dtype_bytes(config, dtype)
    return ModelCost(
        params,
        linear,
        prequantized_weight_bytes(config) or params * elem,
        {"auto": layers * kv_values * elem, "fp8": layers * kv_values},
        attn_flops,
        int(config.get("max_position_embeddings", 0)),
        layers,
        hidden,
        heads,
        kv_heads,
        inter,
        expert_params=sparse * experts,
        expert_fraction=moe.top_k / moe.num_experts if moe else 1.0,
        layer_params=blocks,
    )


def dtype_bytes(config: dict, dtype: str | None = None) -> int:
    """Bytes per weight and KV value: of `dtype`, else of the model's own dtype (bfloat16 when none is named)."""
    dtype = dtype or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} of the model is not one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def prequantized_weight_bytes(config: dict) -> int | None:
    """A pre-quantized checkpoint's weight bytes as the engine loads them (its memory plan's one row:
    codes, scales, zero points, the layers its `ignore` keeps in the model dtype); None for float weights
    or a quantization_config the engine cannot read."""
    if not config.get("quantization_config"):  # float weights: no need to import the engine (torch)
        return None
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_formats import checkpoint_spec

    try:
        if checkpoint_spec(config) is None:
            return None
        plan = plan_memory(config)  # no GPU: the weights' bytes alone, nothing fitted
    except ValueError:
        return None
    return next(iter(plan.weight_bytes_by_format.values()))


def mla_attention_params(mla: MlaArgs, hidden: int) -> int:
    """Parameters of one multi-head latent attention layer: queries (full or low-rank), the compressing
    projection, kv_b_proj up to every head's k_nope and value, o_proj."""
    heads = mla.num_heads
    q = hidden * heads * mla.qk_head_dim
    if mla.q_lora_rank:
        q = hidden * mla.q_lora_rank + mla.q_lora_rank * heads * mla.qk_head_dim
    kv = hidden * mla.latent_dim + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * hidden
