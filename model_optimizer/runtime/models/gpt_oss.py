"""gpt-oss (`GptOssForCausalLM`, model_type gpt_oss: gpt-oss-20b and gpt-oss-120b), as transformers' GptOss
computes it: Llama's decoder layer (models/llama.py) with these differences.

Attention: q/k/v/o projections with biases (`attention_bias`), head_dim 64, GQA (64 query heads over 8 KV
heads in the releases); a learned attention sink per query head (`self_attn.sinks`): one more logit in each
softmax denominator whose weight is dropped (the attention kernels and their CPU path take it,
kernels/paged_attention_kernels.py, kernels/reference.py); layers per `layer_types` (default: even layers
sliding with `sliding_window` 128, odd layers full); YaRN rope (factor 32 over 4096 positions, `truncate`
false: the ramp's ends not rounded) with its attention factor 0.1 ln(32) + 1 on cos and sin, as transformers
scales them (layers/rotary.py); the softmax scale stays head_dim ** -0.5.

Every layer's MLP is a mixture of experts: a router with a bias (`mlp.router.weight`, `.bias`), top-k of the
raw logits (`num_experts_per_tok` 4), softmax over those k (the same weights as a softmax over all experts
renormalized over the k, which is what the GPU's routing kernel computes); each expert
(`mlp.experts.gate_up_proj` (experts, hidden, 2I) + `gate_up_proj_bias`, `down_proj` (experts, I, hidden) +
`down_proj_bias`, transposed relative to nn.Linear) computes gate and up from INTERLEAVED columns (gate =
[..., ::2], up = [..., 1::2]), then the clamped SwiGLU (gate clamped above at `swiglu_limit` 7, up to
[-7, 7], (up + 1) * gate * sigmoid(1.702 gate)) and the down projection plus its bias. At load the
interleaved columns are split into the engine's [gate; up] rows (layers/moe.py FusedExperts), so the fused
MoE kernel keeps its layout and only gains a bias and an activation variant (constexprs, off for others).

Checkpoints: the bf16 (or fp32) tensors above, or the released MXFP4 ones (`quantization_config`
{quant_method: mxfp4}): each expert projection as `<proj>_blocks` (uint8, two e2m1 values a byte, low nibble
first, 16 bytes per group of 32) and `<proj>_scales` (uint8 e8m0 exponents, one per group, bias 127), in
nn.Linear's (out, in) order. MXFP4 is DEQUANTIZED to the model dtype at load (`dequantize_mxfp4`, per expert),
not run natively: gpt-oss-20b (21B parameters, 24 layers, 32 experts) then holds about 39 GiB of bf16
weights, which fits one H100 (80 GB) or H200 with room for the KV cache; gpt-oss-120b (117B, 36 layers,
128 experts) holds about 218 GiB in bf16 and needs `--cpu-offload-gb` or several GPUs (tensor or expert
parallelism). Attention, router, embeddings and lm_head are bf16 in both formats. A checkpoint writer (`mopt
quantize`, model/quantize/writer.py) writes the float layout back (`GptOssExperts.checkpoint_tensor`, the
model's `float_stacked_params`): an MXFP4 source comes out dequantized, in the model dtype.

Not here: the harmony chat format's tool and reasoning parsers (the chat template itself comes with the
checkpoint's tokenizer), and LLM.embed (the packed path refuses the sinks).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from model_optimizer.runtime.distributed import get_tp
from model_optimizer.runtime.kernels.dense_linear import dense_linear
from model_optimizer.runtime.kernels.moe_reference import ClampedSwiglu
from model_optimizer.runtime.layers.attention import AttentionMetadata
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, materialize, reads_lazily
from model_optimizer.runtime.layers.moe import FusedExperts, SparseMoeBlock, TopKRouter
from model_optimizer.runtime.layers.norm import RMSNorm
from model_optimizer.runtime.layers.quantization.spec import dequantized_at_load
from model_optimizer.runtime.layers.rotary import RotaryEmbedding, Rotation
from model_optimizer.runtime.models.llama import DecoderAttention, DecoderLayer, LlamaForCausalLM
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import MoeArgs

LAYER_TYPES = ("sliding_attention", "full_attention")
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
"""The e2m1 code points, indexed by the 4-bit code (transformers' integrations/mxfp4.py FP4_VALUES)."""
SCALE_BIAS = 127
"""e8m0: a scale byte s means 2 ** (s - 127)."""
MXFP4_GROUP = 32


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., groups, 16) uint8 blocks and (..., groups) uint8 scales -> (..., groups * 32) values in `dtype`:
    value 2j of a group is the low nibble of byte j, value 2j + 1 its high nibble, each an e2m1 code point
    times 2 ** (scale - 127). transformers' `convert_moe_packed_tensors` computes the same values (before its
    final transpose; tests/runtime/models/test_gpt_oss.py checks it)."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != MXFP4_GROUP // 2:
        raise ValueError(
            f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not fit: blocks must be "
            "(..., groups, 16) and scales (..., groups)"
        )
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    blocks = blocks.to(torch.uint8)
    values = torch.stack([lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]], dim=-1)  # (..., G, 16, 2)
    values = values.flatten(-2)  # (..., G, 32)
    values = torch.ldexp(values, (scales.to(torch.int32) - SCALE_BIAS)[..., None].float())
    return values.flatten(-2).to(dtype)


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `dequantize_mxfp4` up to rounding, for writing test checkpoints: (..., K) float values ->
    ((..., K / 32, 16) uint8 blocks, (..., K / 32) uint8 scales). Each group's scale is 2 ** (floor(log2(amax))
    - 2) (the OCP MX rule, e2m1's largest exponent being 2), each value the nearest code point (ties to the
    lower code, magnitudes above 6 saturate)."""
    *lead, k = weight.shape
    groups = weight.float().reshape(*lead, k // MXFP4_GROUP, MXFP4_GROUP)
    amax = groups.abs().amax(dim=-1)
    exponent = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(2.0**-126))) - 2, torch.zeros_like(amax))
    exponent = exponent.clamp(-SCALE_BIAS, 127)
    scaled = groups / torch.ldexp(torch.ones_like(exponent), exponent.int())[..., None]
    points = torch.tensor(FP4_VALUES[:8])
    codes = (scaled.abs()[..., None] - points).abs().argmin(dim=-1)  # magnitude code 0..7
    codes = codes + 8 * ((scaled < 0) & (codes > 0))
    codes = codes.to(torch.uint8).reshape(*lead, k // MXFP4_GROUP, MXFP4_GROUP // 2, 2)
    blocks = codes[..., 0] | (codes[..., 1] << 4)
    return blocks, (exponent + SCALE_BIAS).to(torch.uint8)


def gpt_oss_layer_types(hf: dict, num_layers: int) -> list[str]:
    """config.json's `layer_types`, else GptOssConfig's default: even layers sliding, odd layers full."""
    types = hf.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(num_layers)]
    if not isinstance(types, list) or len(types) != num_layers or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"config.json: layer_types must list {num_layers} of {', '.join(LAYER_TYPES)}, got {types!r}")
    return types


def moe_args(args: DecoderArgs) -> MoeArgs:
    return MoeArgs.from_hf(args.hf, "intermediate_size", renormalize=True)


def expert_activation(hf: dict) -> ClampedSwiglu:
    limit, alpha = hf.get("swiglu_limit", 7.0), hf.get("swiglu_alpha", 1.702)
    for key, value in (("swiglu_limit", limit), ("swiglu_alpha", alpha)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"config.json: {key} must be a positive number, got {value!r}")
    return ClampedSwiglu(alpha=float(alpha), limit=float(limit))


class GptOssRouter(TopKRouter):
    """logits = x W^T + b; the top-k logits, then softmax over those k (transformers' GptOssTopKRouter). On
    CUDA the routing kernel's softmax over all experts renormalized over the k: the same weights."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__(hidden_size, num_experts, top_k, renormalize=True)
        self.bias = nn.Parameter(torch.empty(num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.route(dense_linear(x, self.weight, self.bias))

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if logits.is_cuda:
            return super().route(logits)
        values, ids = torch.topk(logits, self.top_k, dim=-1)
        return torch.softmax(values, dim=-1, dtype=values.dtype).float(), ids  # in the logits' dtype, as transformers


class GptOssExperts(FusedExperts):
    """FusedExperts with biases and the clamped SwiGLU, filled from gpt-oss's stacked tensors (shard ids
    `gate_up`, `down`, `gate_up_bias`, `down_bias`, and for MXFP4 `<proj>_blocks` / `<proj>_scales`, which are
    kept until their partner arrives, then dequantized one expert at a time on the parameter's device)."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, activation: ClampedSwiglu) -> None:
        super().__init__(num_experts, hidden_size, intermediate_size, bias=True, activation=activation)
        for param in (self.w13_weight, self.w2_weight, self.w13_bias, self.w2_bias):
            param.weight_loader = self._load_stacked  # type: ignore[attr-defined]
        self._packed: dict[str, dict[str, torch.Tensor | LazyTensor]] = {}

    def _local(self, loaded: torch.Tensor | LazyTensor, dtype: torch.dtype) -> torch.Tensor:
        """This rank's experts of a stacked (experts, ...) checkpoint tensor, read in `dtype`."""
        if loaded.shape[0] != self.num_experts:
            raise ValueError(f"expected {self.num_experts} experts in dimension 0, got shape {tuple(loaded.shape)}")
        return materialize(loaded.narrow(0, self.first_expert, self.num_local_experts), dtype)

    @reads_lazily
    def _load_stacked(
        self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None
    ) -> None:
        experts, hidden, full = self.num_experts, self.hidden_size, self.full_intermediate_size
        expected = {
            "gate_up": (experts, hidden, 2 * full),
            "down": (experts, full, hidden),
            "gate_up_bias": (experts, 2 * full),
            "down_bias": (experts, hidden),
        }
        if shard_id in expected:
            if tuple(loaded.shape) != expected[shard_id]:
                raise ValueError(f"expected shape {expected[shard_id]} for {shard_id}, got {tuple(loaded.shape)}")
            value = self._local(loaded, param.dtype)
            if shard_id == "gate_up":
                self._put_gate_up(value.transpose(1, 2))  # (experts, 2I, hidden): nn.Linear's rows, interleaved
            elif shard_id == "down":
                self._put_down(value.transpose(1, 2))  # (experts, hidden, I)
            elif shard_id == "gate_up_bias":
                self._put_rows(self.w13_bias.data, value)
            else:
                self._put_down_bias(value)
            return
        proj, _, part = (shard_id or "").rpartition("_")
        if proj not in ("gate_up", "down") or part not in ("blocks", "scales"):
            raise ValueError(f"unknown gpt-oss expert shard {shard_id!r}")
        pending = self._packed.setdefault(proj, {})
        pending[part] = loaded
        if len(pending) == 2:
            self._dequantize(proj, pending.pop("blocks"), pending.pop("scales"))
            del self._packed[proj]

    def _dequantize(self, proj: str, blocks: torch.Tensor | LazyTensor, scales: torch.Tensor | LazyTensor) -> None:
        out_rows, in_cols = (2 * self.full_intermediate_size, self.hidden_size)
        if proj == "down":
            out_rows, in_cols = self.hidden_size, self.full_intermediate_size
        groups = in_cols // MXFP4_GROUP
        if in_cols % MXFP4_GROUP or tuple(scales.shape) != (self.num_experts, out_rows, groups):
            raise ValueError(
                f"expected {proj}_scales of shape {(self.num_experts, out_rows, groups)}, got {tuple(scales.shape)}"
            )
        if tuple(blocks.shape) != (self.num_experts, out_rows, groups, MXFP4_GROUP // 2):
            raise ValueError(
                f"expected {proj}_blocks of shape {(self.num_experts, out_rows, groups, 16)}, got {tuple(blocks.shape)}"
            )
        device, dtype = self.w13_weight.device, self.w13_weight.dtype
        for e in range(self.num_local_experts):  # one expert at a time: the float copy of one, not of all
            index = self.first_expert + e
            b = materialize(blocks.narrow(0, index, 1), torch.uint8).to(device)
            s = materialize(scales.narrow(0, index, 1), torch.uint8).to(device)
            rows = dequantize_mxfp4(b, s, dtype)  # (1, out_rows, in_cols): nn.Linear's layout
            if proj == "gate_up":
                self._put_gate_up(rows, first=e)
            else:
                self._put_down(rows, first=e)

    def checkpoint_tensor(self, param: nn.Parameter, shard_id: str) -> torch.Tensor:
        """The stacked checkpoint tensor `shard_id` (gate_up, down, gate_up_bias, down_bias) in transformers'
        GptOss layout, whole model only: the inverse of `_load_stacked` (model/quantize/writer.py writes it)."""
        self.require_whole()
        if shard_id in ("gate_up", "gate_up_bias"):
            stacked = (self.w13_weight if shard_id == "gate_up" else self.w13_bias).data
            gate, up = stacked.chunk(2, dim=1)  # [gate; up] rows -> rows alternating gate, up
            interleaved = torch.stack([gate, up], dim=2).flatten(1, 2)
            return interleaved.transpose(1, 2) if shard_id == "gate_up" else interleaved
        if shard_id == "down":
            return self.w2_weight.data.transpose(1, 2)
        if shard_id == "down_bias":
            return self.w2_bias.data
        expected = ", ".join(shard for _, shard in FLOAT_EXPERTS.values())
        raise ValueError(f"unknown gpt-oss expert shard {shard_id!r} to write; expected {expected}")

    def _put_rows(self, target: torch.Tensor, interleaved: torch.Tensor) -> None:
        """target (local experts, 2 * local I, ...) <- [gate; up] of this rank's slice of (n, 2I, ...) rows
        that alternate gate, up."""
        start, size = self.intermediate_start, self.intermediate_size
        target[:, :size].copy_(interleaved[:, 0::2][:, start : start + size])
        target[:, size:].copy_(interleaved[:, 1::2][:, start : start + size])

    def _put_gate_up(self, rows: torch.Tensor, first: int | None = None) -> None:
        target = self.w13_weight.data if first is None else self.w13_weight.data[first : first + rows.shape[0]]
        self._put_rows(target, rows)

    def _put_down(self, rows: torch.Tensor, first: int | None = None) -> None:
        target = self.w2_weight.data if first is None else self.w2_weight.data[first : first + rows.shape[0]]
        target.copy_(rows[:, :, self.intermediate_start : self.intermediate_start + self.intermediate_size])

    def _put_down_bias(self, value: torch.Tensor) -> None:
        # intermediate slices (tensor parallel): one rank adds the bias, the all_reduce sums it once
        keep = self.expert_parallel or self.intermediate_start == 0
        self.w2_bias.data.copy_(value if keep else torch.zeros_like(value))


class GptOssAttention(DecoderAttention):
    """Llama's attention (q/k/v/o biases via attention_bias) with a learned sink logit per query head."""

    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        super().__init__(args, layer_idx, rotary)
        first_head, _ = get_tp().shard(args.num_heads, "num_attention_heads")
        self.sinks = nn.Parameter(torch.empty(self.num_heads))
        self.sinks.weight_loader = self._load_sinks  # type: ignore[attr-defined]
        self._first_head, self._all_heads = first_head, args.num_heads

    @reads_lazily
    def _load_sinks(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        if tuple(loaded.shape) != (self._all_heads,):
            raise ValueError(f"expected shape {(self._all_heads,)} for the attention sinks, got {tuple(loaded.shape)}")
        param.data.copy_(materialize(loaded.narrow(0, self._first_head, self.num_heads), param.dtype))

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        out = self.attn(q, k, v, meta, Rotation(self.rotary, positions), sinks=self.sinks)
        return self.o_proj(out)


class GptOssDecoderLayer(DecoderLayer):
    def __init__(self, args: DecoderArgs, layer_idx: int, rotary: RotaryEmbedding) -> None:
        nn.Module.__init__(self)
        self.self_attn = GptOssAttention(args, layer_idx, rotary)
        self.mlp = self.build_mlp(args, layer_idx)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def build_mlp(self, args: DecoderArgs, layer_idx: int) -> nn.Module:
        moe = moe_args(args)
        return SparseMoeBlock(
            GptOssRouter(args.hidden_size, moe.num_experts, moe.top_k),
            GptOssExperts(moe.num_experts, args.hidden_size, moe.intermediate_size, expert_activation(args.hf)),
        )


ATTENTION_PARAMS = {k: v for k, v in LlamaForCausalLM.stacked_params.items() if v[0] == ".qkv_proj."}
FLOAT_EXPERTS = {
    ".mlp.experts.gate_up_proj_bias": (".mlp.experts.w13_bias", "gate_up_bias"),
    ".mlp.experts.down_proj_bias": (".mlp.experts.w2_bias", "down_bias"),
    ".mlp.experts.gate_up_proj": (".mlp.experts.w13_weight", "gate_up"),
    ".mlp.experts.down_proj": (".mlp.experts.w2_weight", "down"),
}
"""bf16 / fp32 checkpoints' expert tensors (longest names first: `gate_up_proj` is part of `gate_up_proj_bias`)."""
MXFP4_EXPERTS = {
    ".mlp.experts.gate_up_proj_bias": (".mlp.experts.w13_bias", "gate_up_bias"),
    ".mlp.experts.down_proj_bias": (".mlp.experts.w2_bias", "down_bias"),
    ".mlp.experts.gate_up_proj_blocks": (".mlp.experts.w13_weight", "gate_up_blocks"),
    ".mlp.experts.gate_up_proj_scales": (".mlp.experts.w13_weight", "gate_up_scales"),
    ".mlp.experts.down_proj_blocks": (".mlp.experts.w2_weight", "down_blocks"),
    ".mlp.experts.down_proj_scales": (".mlp.experts.w2_weight", "down_scales"),
}
"""MXFP4 checkpoints' expert tensors: blocks and scales of each weight, float biases."""


class GptOssForCausalLM(LlamaForCausalLM):
    def __init__(self, args: DecoderArgs) -> None:
        moe_args(args)  # a plain message for a broken config before any layer is built
        expert_activation(args.hf)
        types = gpt_oss_layer_types(args.hf, args.num_layers)
        window = args.hf.get("sliding_window")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ValueError(f"config.json: 'sliding_window' must be a positive integer or null, got {window!r}")
        windows = tuple(window if t == "sliding_attention" else None for t in types)
        args = replace(args, layer_windows=windows, attention_bias=bool(args.hf.get("attention_bias", True)))
        super().__init__(args, GptOssDecoderLayer)
        # the router is one whole tensor; the shard id only carries the rename through the loader
        router = {".mlp.router.": (".mlp.gate.", "router")}
        self.float_stacked_params = {**FLOAT_EXPERTS, **router, **ATTENTION_PARAMS}
        """The float layout's names, which a checkpoint writer uses (model/quantize/writer.py): an MXFP4 source is
        written dequantized, in the model dtype."""
        self.stacked_params = (
            {**MXFP4_EXPERTS, **router, **ATTENTION_PARAMS}
            if dequantized_at_load(args.hf)
            else self.float_stacked_params
        )
