"""Memory plan: weight bytes per format, KV bytes per token, and what fits on a GPU, by the engine's rules.

The engine (runtime/runner/kv_sizing.py) sizes its KV cache by profiling: it runs one forward of
min(max_num_batched_tokens, max_model_len) tokens plus the logits of max_num_seqs rows, takes the
allocator's peak (weights, buffers, activations) as its own, and gives the KV cache
`int(total * gpu_memory_utilization) - peak`, never more than free memory minus 256 MiB, in whole
blocks of 2 * layers * block_size * kv_heads * head_dim elements. This module computes the same
numbers without a GPU: the weights and buffers from the engine's model built on the meta device,
the activation peak from the tensors alive at the widest point of that forward.

Under tensor parallelism (`engine.tensor_parallel_size` N) every figure is per GPU: the meta model
is rank 0's shard as a worker builds it, so the engine's own rules decide the sizes (heads, MLP
width and KV heads split N ways, KV heads replicated when fewer than N, vocabulary padded to a
multiple of N, norms whole on every GPU). Each rank sizes its cache the same way and the engine
keeps the smallest, which on identical GPUs is every rank's.

A checkpoint that is already quantized (quantization_config: AutoAWQ, compressed-tensors, block-wise
fp8) is planned only in the format the engine loads it as (resolve_spec, the engine's own reading of
it), with its own int4 group size, on one GPU: the engine serves it no other way.

`plan_memory(config, gpu, engine)` is what the tuner calls to skip settings that cannot fit. The model's
sizes come from plan_shape.py, the GPU's capacity from plan_gpu.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from model_optimizer.model.inspect.offload_plan import advice_note, offload_rows
from model_optimizer.model.inspect.plan_formats import QUANT_FORMATS, checkpoint_spec, refused_format
from model_optimizer.model.inspect.plan_gpu import CUDA_CONTEXT_BYTES, MIB, GpuMemory
from model_optimizer.model.inspect.plan_shape import MAX_TENSOR_PARALLEL_SIZE, ModelShape, model_shape, split_shape
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.layers.quantization.quantizers import DEFAULT_GROUP_SIZE
from model_optimizer.runtime.layers.quantization.spec import QuantSpec

if TYPE_CHECKING:
    from model_optimizer.runtime.models.model_config import DecoderArgs

ENGINE_HEADROOM_BYTES = 256 * MIB
"""The engine keeps this much free for CUDA graphs and sampler temporaries (runner/kv_sizing.py)."""
RUNTIME_BYTES = 32 * MIB
"""Allocations the forward makes besides tensors: the cuBLAS workspace (32 MiB on Hopper). Checked
against the engine's measured peak on an H200 (benchmarks/results/throughput_h200.json; the
comparison is in README "Inspect a checkpoint", memory plan)."""

METHOD_FORMATS = {"fp8": "fp8", "int8": "int8", "int8-w8a8": "int8", "awq": "int4", "rtn-int4": "int4"}
"""The format the engine holds a pre-quantized checkpoint's method in (QuantSpec.method -> format):
block-wise fp8 and int8 in groups are re-rounded per output row as they load."""
SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
"""The unquantized row of the plan is named for the dtype the engine runs (bf16 for most models)."""
KV_DTYPE_BYTES = {"fp8": 1}


@dataclass
class FitRow:
    weight_format: str
    kv_cache_dtype: str
    weight_bytes: int
    activation_bytes: int
    kv_budget_bytes: int
    num_kv_blocks: int
    num_tokens: int
    num_sequences: int
    """Sequences of seq_len tokens whose KV fits at once (before the max_num_seqs cap)."""
    capped_by_max_num_seqs: bool


@dataclass
class MemoryPlan:
    model: str
    dtype: str
    num_params: int
    weight_bytes_by_format: dict[str, int]
    kv_bytes_per_token: dict[str, int]
    """kv_cache_dtype -> bytes per token over all layers (K and V, or multi-head latent attention's row)."""
    bytes_per_block: dict[str, int]
    activation_bytes: dict[str, int]
    """kv_cache_dtype -> the profile forward's peak beyond weights and buffers."""
    cuda_graph_bytes: int
    """Estimated memory of captured decode graphs (allocated after the KV cache, inside the headroom)."""
    gpu_memory_utilization: float
    seq_len: int
    max_model_len: int
    profile_tokens: int
    gpu: GpuMemory | None = None
    fits: list[FitRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tensor_parallel_size: int = 1
    """GPUs the model is split across; every figure above (num_params and the bytes) is one GPU's."""
    num_active_params: int = 0
    """Parameters one token runs through (one GPU's share): a mixture of experts' top_k experts per layer,
    not all of them; num_params for a dense model."""
    expert_parallel: bool = False
    """Whole experts per GPU (enable_expert_parallel) rather than a slice of each."""
    full_head_kv_bytes_per_token: dict[str, int] = field(default_factory=dict)
    """Multi-head latent attention: kv_cache_dtype -> the bytes per token a cache of every head's keys and
    values would need (what kv_bytes_per_token is compared with); empty for other attention."""
    min_tensor_parallel_size: dict[str, int | None] = field(default_factory=dict)
    """Weight format -> the smallest tensor_parallel_size (up to MAX_TENSOR_PARALLEL_SIZE) at which one
    sequence of seq_len fits each GPU with the model-dtype KV cache; None when none does. Only with
    a GPU, for the formats that do not fit at this plan's size; never for a pre-quantized checkpoint,
    which the engine runs on one GPU only."""
    offload: list[Any] = field(default_factory=list)
    """OffloadAdvice (offload_plan.py) for each weight format that does not fit: --cpu-offload-gb and its
    cost per step. Only with a GPU."""

    def row(self, weight_format: str = "bf16", kv_cache_dtype: str = "auto") -> FitRow:
        for r in self.fits:
            if r.weight_format == weight_format and r.kv_cache_dtype == kv_cache_dtype:
                return r
        raise ValueError(f"no plan row for weights {weight_format!r} with kv_cache_dtype {kv_cache_dtype!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def weight_bytes(shape: ModelShape, fmt: str, dtype_bytes: int, group_size: int = DEFAULT_GROUP_SIZE) -> int:
    """Bytes of all weights in `fmt`: a quantized format (int4 in groups of `group_size` inputs), or
    anything else for the model dtype."""
    if fmt not in QUANT_FORMATS:
        return shape.num_params * dtype_bytes
    other = (shape.num_params - shape.linear_params) * dtype_bytes
    if fmt == "int4":  # a scale in the model dtype and a uint8 zero point per group of each row
        side = shape.linear_params // group_size * (dtype_bytes + 1)
    else:
        side = shape.linear_out_rows * 4
    return other + int(shape.linear_params * QUANT_FORMATS[fmt][0]) + side


def prequantized_note(spec: QuantSpec, dtype_name: str) -> str:
    fmt = METHOD_FORMATS[spec.method]
    groups = f" in groups of {spec.group_size}" if fmt == "int4" else ""
    return (
        f"already quantized ({spec.method}, {spec.source} layout): the engine loads it as {fmt}{groups} and "
        f"serves it no other way, so only {fmt} is planned; what its quantization_config leaves out stays in "
        f"{dtype_name}"
    )


def profile_activation_bytes(
    shape: ModelShape, num_tokens: int, num_logit_rows: int, dtype_bytes: int, kv_bytes: int, block_size: int
) -> int:
    """The peak the engine's profile forward adds to the weights, from the tensors alive at once.

    In a decoder layer four (tokens, hidden) tensors live throughout (the layer's input, the residual
    it came with, the new residual, the normed input); the MLP adds [gate | up] and its activation,
    attention adds q/k/v, the rotated q and k and the output. After the last layer the logits of
    `num_logit_rows` rows join the final hidden states. One scratch KV block table spans the tokens."""
    t, h = num_tokens, shape.hidden_size
    mlp = 4 * t * h + 3 * t * shape.intermediate_size
    if shape.moe_top_k:  # each (token, expert) pair's intermediate and output rows, the k outputs' sum, the
        # router's logits and float32 probabilities (two elements each); Gemma-like gelu MLPs are a tI more
        pairs = t * shape.moe_top_k
        mlp = max(mlp, 5 * t * h + pairs * (shape.moe_intermediate_size + h) + 3 * t * shape.num_experts)
    attention = 5 * t * h + t * (shape.q_size + 2 * shape.kv_size) + t * (2 * shape.q_size + shape.kv_size)
    if shape.mla_attention_values:
        attention = 5 * t * h + t * shape.mla_attention_values
    logits = 2 * t * h + num_logit_rows * shape.vocab_size
    if shape.tensor_parallel_size > 1:  # this rank's block, the gathered blocks and their concatenation
        logits = 2 * t * h + num_logit_rows * (shape.vocab_size * (2 * shape.tensor_parallel_size + 1))
    scratch_kv = -(-t // block_size) * block_size * shape.kv_values_per_token * kv_bytes
    index_tensors = 4 * t * 8
    return max(mlp, attention, logits) * dtype_bytes + scratch_kv + index_tensors + RUNTIME_BYTES


def plan_memory(
    config: dict, gpu: GpuMemory | None = None, engine: EngineConfig | None = None, seq_len: int | None = None
) -> MemoryPlan:
    """The memory plan of the model of `config.json` under `engine`'s settings, on `gpu` if given; of a
    pre-quantized checkpoint, in the one format the engine loads it as."""
    from model_optimizer.runtime.models.model_config import DecoderArgs

    engine = engine or EngineConfig()
    args = DecoderArgs.from_dict(config)
    dtype_name, dtype_bytes = _model_dtype(engine, args)
    tp_size = engine.tensor_parallel_size
    spec = checkpoint_spec(config)
    shape = split_shape(config, dtype_name, engine, spec)
    group_size = spec.group_size if spec is not None else DEFAULT_GROUP_SIZE
    expert_parallel = engine.enable_expert_parallel and tp_size > 1
    refused = {} if spec is not None else _refused_formats(config, dtype_name, tp_size, expert_parallel)
    formats = (
        [METHOD_FORMATS[spec.method]]
        if spec is not None
        else [SHORT_DTYPES[dtype_name], *(f for f in QUANT_FORMATS if f not in refused)]
    )
    max_model_len, seq_len = _lengths(engine, shape, seq_len)
    plan = MemoryPlan(
        model=shape.name,
        dtype=dtype_name,
        num_params=shape.num_params,
        weight_bytes_by_format={f: weight_bytes(shape, f, dtype_bytes, group_size) for f in formats},
        gpu_memory_utilization=engine.gpu_memory_utilization,
        seq_len=seq_len,
        max_model_len=max_model_len,
        gpu=gpu,
        tensor_parallel_size=tp_size,
        num_active_params=shape.num_active_params,
        expert_parallel=expert_parallel,
        **_byte_sizes(shape, engine, dtype_bytes, max_model_len),
    )
    if spec is not None:
        plan.notes.append(prequantized_note(spec, dtype_name))
    plan.notes += [f"{fmt} weights: left out, as the engine refuses them: {reason}" for fmt, reason in refused.items()]
    plan.notes += _model_notes(shape, args, tp_size)
    if gpu is not None:
        _plan_gpu(plan, shape, config, gpu, engine, spec)
    return plan


def _refused_formats(config: dict, dtype_name: str, tp_size: int, expert_parallel: bool) -> dict[str, str]:
    """The quantized formats the engine would refuse to round this float checkpoint to, with its reasons."""
    reasons = {fmt: refused_format(config, fmt, dtype_name, tp_size, expert_parallel) for fmt in QUANT_FORMATS}
    return {fmt: reason for fmt, reason in reasons.items() if reason is not None}


def _model_dtype(engine: EngineConfig, args: DecoderArgs) -> tuple[str, int]:
    """The dtype the engine runs the model in (--dtype, else the checkpoint's) and its bytes per element."""
    import torch

    from model_optimizer.runtime.models.loader import resolve_dtype

    dtype = resolve_dtype(engine.dtype, args, torch.device("cuda"))
    return str(dtype).removeprefix("torch."), torch.tensor([], dtype=dtype).element_size()


def _lengths(engine: EngineConfig, shape: ModelShape, seq_len: int | None) -> tuple[int, int]:
    """max_model_len (the engine's, else the model's) and the sequence length the plan fits (max_model_len
    when not given), each checked against its bound."""
    max_model_len = engine.max_model_len or shape.max_position_embeddings
    if max_model_len > shape.max_position_embeddings:
        raise ValueError(
            f"max_model_len {max_model_len} exceeds the model's max_position_embeddings ({shape.max_position_embeddings})"
        )
    seq_len = max_model_len if seq_len is None else seq_len  # 0 is refused, not read as "unset"
    if seq_len <= 0 or seq_len > max_model_len:
        raise ValueError(f"seq_len must be in 1..max_model_len ({max_model_len}), got {seq_len}")
    return max_model_len, seq_len


def _byte_sizes(shape: ModelShape, engine: EngineConfig, dtype_bytes: int, max_model_len: int) -> dict[str, Any]:
    """MemoryPlan's fields per kv_cache_dtype (KV bytes per token and per block, the profile forward's
    activation peak; a full-head cache's bytes for multi-head latent attention) and the decode graphs'."""
    profile_tokens = min(engine.max_num_batched_tokens, max_model_len)
    kv_elem = {"auto": dtype_bytes, "fp8": KV_DTYPE_BYTES["fp8"]}
    per_token = {k: shape.num_layers * shape.kv_values_per_token * e for k, e in kv_elem.items()}
    logit_rows, graph_tokens = min(engine.max_num_seqs, profile_tokens), min(engine.max_num_seqs, max_model_len)
    graph_bytes = profile_activation_bytes(shape, graph_tokens, graph_tokens, dtype_bytes, 0, engine.block_size)
    full_head = {k: shape.num_layers * shape.full_head_kv_values * e for k, e in kv_elem.items()}
    return {
        "kv_bytes_per_token": per_token,
        "bytes_per_block": {k: v * engine.block_size for k, v in per_token.items()},
        "activation_bytes": {
            k: profile_activation_bytes(shape, profile_tokens, logit_rows, dtype_bytes, e, engine.block_size)
            for k, e in kv_elem.items()
        },
        "cuda_graph_bytes": graph_bytes - RUNTIME_BYTES,
        "profile_tokens": profile_tokens,
        "full_head_kv_bytes_per_token": full_head if shape.full_head_kv_values else {},
    }


def _model_notes(shape: ModelShape, args: DecoderArgs, tp_size: int) -> list[str]:
    """What the plan says of the model's attention, experts and split over `tp_size` GPUs."""
    notes = []
    if shape.full_head_kv_values:
        notes.append(
            f"multi-head latent attention: {shape.kv_values_per_token} cached values per token and layer "
            f"(compressed KV and rope key) where every head's keys and values would be {shape.full_head_kv_values}: "
            f"a {shape.full_head_kv_values / shape.kv_values_per_token:.1f}x smaller KV cache"
            + (", the same on every GPU (each holds the latent)" if tp_size > 1 else "")
        )
    if shape.expert_params:
        notes.append(
            f"mixture of experts: {shape.num_experts} experts per layer, {shape.moe_top_k} per token; a decode "
            f"step reads the experts its tokens are routed to (about {shape.num_active_params / 1e9:.2f} B of "
            f"{shape.num_params / 1e9:.2f} B parameters at batch 1), but every expert stays in memory"
        )
    if tp_size > 1:
        notes.append(
            f"per GPU of {tp_size}: layers split {tp_size} ways, "
            + (
                "the latent cache whole on each GPU"
                if shape.full_head_kv_values
                else f"{shape.kv_size // args.head_dim} KV head(s) per GPU"
                + (" (replicated: fewer KV heads than GPUs)" if args.num_kv_heads < tp_size else "")
            )
            + f", vocabulary padded to {shape.vocab_size * tp_size:,}, norms whole on each GPU"
        )
    return notes


def _plan_gpu(
    plan: MemoryPlan, shape: ModelShape, config: dict, gpu: GpuMemory, engine: EngineConfig, spec: QuantSpec | None
) -> None:
    """What fits `gpu` in each format, and for those in which no sequence does, more GPUs (a float
    checkpoint only: the engine runs a pre-quantized one on one GPU) and weight offload."""
    plan.fits = [
        _fit(plan, shape, gpu, engine, fmt, kv) for fmt in plan.weight_bytes_by_format for kv in plan.kv_bytes_per_token
    ]
    short = [fmt for fmt in plan.weight_bytes_by_format if plan.row(fmt).num_sequences < 1]
    lacks = f"no sequence of {plan.seq_len:,} tokens fits one GPU at tensor_parallel_size {plan.tensor_parallel_size}"
    if spec is None:
        plan.min_tensor_parallel_size = smallest_fitting_tensor_parallel_sizes(config, gpu, engine, plan.seq_len, short)
        plan.notes += [
            f"{fmt} weights: {lacks}; "
            + (
                f"the smallest that fits is --tensor-parallel-size {size}"
                if size
                else f"none up to {MAX_TENSOR_PARALLEL_SIZE} GPUs does"
            )
            for fmt, size in plan.min_tensor_parallel_size.items()
        ]
    else:
        plan.notes += [
            f"{fmt} weights: {lacks}, the only size the engine runs a pre-quantized checkpoint at" for fmt in short
        ]
    plan.offload = offload_rows(plan, config)
    plan.notes += [advice_note(advice, plan.seq_len) for advice in plan.offload]
    if spec is None:
        plan.notes.append(
            "weights in fp8/int8/int4 quantize the linear layers only; embedding, lm_head and norms stay "
            f"in {plan.dtype}"
        )
    if gpu.source == "datasheet":
        plan.notes.append("datasheet capacity: the driver reports a little less; --gpu live measures it")


def smallest_fitting_tensor_parallel_sizes(
    config: dict, gpu: GpuMemory, engine: EngineConfig, seq_len: int, weight_formats: list[str]
) -> dict[str, int | None]:
    """Weight format -> the smallest tensor_parallel_size above `engine`'s (up to MAX_TENSOR_PARALLEL_SIZE)
    at which one sequence of seq_len tokens fits each GPU with weights in it and the model-dtype KV
    cache; None where none does. Each size is planned once for all the formats; a size the engine
    refuses (its ValueError: a mixture's expert width that does not divide, say) is passed over, so the
    search never ends the plan it is part of."""
    found: dict[str, int | None] = dict.fromkeys(weight_formats)
    for n in range(engine.tensor_parallel_size + 1, MAX_TENSOR_PARALLEL_SIZE + 1):
        try:
            plan = plan_memory(config, None, replace(engine, tensor_parallel_size=n), seq_len)
        except ValueError:
            continue
        shape = model_shape(config, plan.dtype, n, engine.enable_expert_parallel)
        for fmt in (f for f, size in found.items() if size is None):
            if fmt in plan.weight_bytes_by_format and _fit(plan, shape, gpu, engine, fmt, "auto").num_sequences >= 1:
                found[fmt] = n
    return found


def _fit(plan: MemoryPlan, shape: ModelShape, gpu: GpuMemory, engine: EngineConfig, fmt: str, kv: str) -> FitRow:
    weights = plan.weight_bytes_by_format[fmt]
    own_peak = weights + shape.buffer_bytes + plan.activation_bytes[kv]
    free = gpu.free_bytes if gpu.free_bytes is not None else gpu.total_bytes - CUDA_CONTEXT_BYTES
    free_after_load = free - weights - shape.buffer_bytes
    budget = min(
        int(gpu.total_bytes * engine.gpu_memory_utilization) - own_peak, free_after_load - ENGINE_HEADROOM_BYTES
    )
    blocks = max(budget // plan.bytes_per_block[kv], 0)
    tokens = blocks * engine.block_size
    per_seq = -(-plan.seq_len // engine.block_size)
    sequences = blocks // per_seq
    return FitRow(
        fmt, kv, weights, plan.activation_bytes[kv], budget, blocks, tokens, sequences, sequences > engine.max_num_seqs
    )
