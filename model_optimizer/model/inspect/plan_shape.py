"""A model's shape as the memory plan reads it: parameter, buffer and KV sizes of the engine's own model,
built on the meta device as one GPU of a tensor-parallel group builds its shard, and the group sizes the engine
accepts for it (memory_plan.py turns these sizes into bytes)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from model_optimizer.model.inspect.plan_formats import checkpoint_spec
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.layers.quantization.spec import QuantSpec

MAX_TENSOR_PARALLEL_SIZE = 8
"""The most GPUs one host holds (an 8-GPU server); beyond it users go to a multi-node engine."""


@dataclass
class ModelShape:
    """What the plan needs of a model, read from the engine's own model class on the meta device.
    Under tensor parallelism the sizes are one rank's: q_size, kv_size, intermediate_size, the
    vocabulary rows and the parameter counts are its shard."""

    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    q_size: int
    kv_size: int
    vocab_size: int
    max_position_embeddings: int
    num_params: int
    linear_params: int
    """Weights of the Linear layers a quantized format rounds: all of them, or for a pre-quantized
    checkpoint those its quantization_config does not leave out (quantized_linears)."""
    linear_out_rows: int
    """Sum of output rows of those layers: one scale each for row-wise formats."""
    buffer_bytes: int
    """Non-parameter tensors the model keeps (rotary cos/sin tables), in their own dtypes."""
    tensor_parallel_size: int = 1
    full_vocab_size: int = 0
    """The model's vocabulary: the gathered logits have this many columns on every rank."""
    expert_params: int = 0
    """Parameters of a mixture of experts' experts (this rank's); 0 for a dense model."""
    num_active_params: int = 0
    """Parameters one token runs through: all but the experts, plus its top_k of them per layer."""
    moe_top_k: int = 0
    moe_intermediate_size: int = 0
    """Each expert's intermediate size on this rank (its slice under tensor parallelism)."""
    num_experts: int = 0
    """Experts of a layer (all of them: each rank routes over every expert)."""
    kv_values_per_token: int = 0
    """Values one layer caches per token (the engine's kv_cache_shape): 2 x KV heads x head_dim, or a
    DeepSeek model's latent row (kv_lora_rank + qk_rope_head_dim, whatever the heads)."""
    full_head_kv_values: int = 0
    """For multi-head latent attention, what a full-head cache would hold per token and layer (every
    head's key and value); 0 for other attention."""
    mla_attention_values: int = 0
    """Multi-head latent attention: values per token alive at its widest point beyond the layer's
    (tokens, hidden) tensors (queries, absorbed queries, latent outputs); 0 for other attention."""


def model_shape(
    config: dict, dtype_name: str = "bfloat16", tensor_parallel_size: int = 1, expert_parallel: bool = False
) -> ModelShape:
    """Parameter and buffer sizes of the engine's model for `config`, built on the meta device; one
    GPU's shard of it under tensor parallelism, whole experts per GPU with `expert_parallel`
    (ValueError when the model cannot be split so)."""
    from model_optimizer.model.inspect.consumption import build_meta_model
    from model_optimizer.runtime.distributed import TensorParallel
    from model_optimizer.runtime.layers.attention import kv_cache_shape
    from model_optimizer.runtime.layers.linear import Linear
    from model_optimizer.runtime.layers.moe import FusedExperts, TopKRouter

    model = build_meta_model(config, dtype_name, tensor_parallel_size, expert_parallel)
    args = model.args
    tp = TensorParallel(0, tensor_parallel_size)
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    num_kv_heads = getattr(model, "local_num_kv_heads", tp.kv_heads(args.num_kv_heads)[1])
    experts = [m for m in model.modules() if isinstance(m, FusedExperts)]
    routers = [m for m in model.modules() if isinstance(m, TopKRouter)]
    num_params = sum(p.numel() for p in model.parameters())
    expert_params = sum(m.w13_weight.numel() + m.w2_weight.numel() for m in experts)
    top_k, num_experts = (routers[0].top_k, routers[0].num_experts) if routers else (0, 0)
    mla = getattr(model, "mla", None)
    local_heads = tp.shard(args.num_heads, "num_attention_heads")[1]
    q_size = local_heads * (mla.qk_head_dim if mla else args.head_dim)
    return ModelShape(
        name=args.architecture,
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        intermediate_size=tp.shard(args.intermediate_size, "intermediate_size")[1],
        q_size=q_size,
        kv_size=num_kv_heads * args.head_dim if mla is None else mla.latent_dim,
        vocab_size=model.lm_head.weight.shape[0],
        max_position_embeddings=args.max_position_embeddings,
        num_params=num_params,
        linear_params=sum(m.weight.numel() for m in linears),
        linear_out_rows=sum(m.weight.shape[0] for m in linears),
        buffer_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        tensor_parallel_size=tensor_parallel_size,
        full_vocab_size=args.vocab_size,
        expert_params=expert_params,
        num_active_params=num_params - expert_params + (expert_params * top_k // num_experts if experts else 0),
        moe_top_k=top_k,
        moe_intermediate_size=experts[0].intermediate_size if experts else 0,
        num_experts=num_experts,
        kv_values_per_token=math.prod(kv_cache_shape(model, 1, 1)),
        full_head_kv_values=local_heads * (mla.qk_head_dim + mla.v_head_dim) if mla else 0,
        mla_attention_values=mla.activation_values(local_heads) if mla else 0,
    )


def quantized_linears(shape: ModelShape, config: dict, spec: QuantSpec) -> ModelShape:
    """`shape` counting as linear only the layers `spec` quantizes (attach_quantization, on a copy of
    the engine's model): a pre-quantized checkpoint's `ignore` (lm_head, a mixture's routers, latent
    projections) keeps the others in the model dtype, among the other parameters."""
    import torch

    from model_optimizer.model.inspect.consumption import private_meta_model
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization

    layers = [m for _, m in attach_quantization(private_meta_model(config), spec, torch.bfloat16, dummy=True)]
    return replace(
        shape,
        linear_params=sum(m.in_features * m.out_features for m in layers),
        linear_out_rows=sum(m.out_features for m in layers),
    )


def split_shape(config: dict, dtype_name: str, engine: EngineConfig, spec: QuantSpec | None) -> ModelShape:
    """model_shape at `engine`'s tensor_parallel_size, or the engine's refusal as a ValueError the user can
    act on: a size the model cannot split (naming the valid ones), a pre-quantized checkpoint (`spec`)
    over several GPUs. For a pre-quantized checkpoint, only the layers it quantizes count as linear."""
    from model_optimizer.runtime.models.loader import refuse_pre_quantized

    tp_size = engine.tensor_parallel_size
    refuse_pre_quantized(spec, "auto", tp_size)
    try:
        shape = model_shape(config, dtype_name, tp_size, engine.enable_expert_parallel)
    except ValueError as exc:
        if tp_size == 1:
            raise
        sizes = ", ".join(map(str, valid_tensor_parallel_sizes(config, expert_parallel=engine.enable_expert_parallel)))
        raise ValueError(
            f"tensor_parallel_size {tp_size} cannot split this model: {exc}; valid sizes: {sizes}"
        ) from None
    return shape if spec is None else quantized_linears(shape, config, spec)


def valid_tensor_parallel_sizes(
    config: dict, limit: int = MAX_TENSOR_PARALLEL_SIZE, expert_parallel: bool = False
) -> list[int]:
    """The sizes in 1..limit the engine accepts for this model: those its model builds at, as rank 0 of
    them (heads, KV heads, MLP and expert widths: each layer checks its own split), and its loader
    takes (a pre-quantized checkpoint: 1 only)."""
    spec = checkpoint_spec(config)
    return [n for n in range(1, limit + 1) if _accepts(config, spec, n, expert_parallel)]


def _accepts(config: dict, spec: QuantSpec | None, size: int, expert_parallel: bool) -> bool:
    from model_optimizer.model.inspect.consumption import build_meta_model
    from model_optimizer.runtime.models.loader import refuse_pre_quantized

    try:
        refuse_pre_quantized(spec, "auto", size)
        build_meta_model(config, "bfloat16", size, expert_parallel)
    except ValueError:
        return False
    return True
