"""Where a quantized layer's weights come from: a dense checkpoint (quantized on the fly) or one of
the quantized checkpoint layouts users download (AutoAWQ GEMM, block-wise FP8, compressed-tensors).

A staged source registers one empty parameter per checkpoint tensor name (qweight, weight_scale ...)
so the loader finds it by name, fused shards included; its `weight_loader` only keeps the tensor.
Once all are in, `finish` converts shard by shard to the shared layout and stacks the shards.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.quantization.quantizers import QuantizedWeight, quantize_fp8, quantize_int8

if TYPE_CHECKING:
    from model_optimizer.runtime.layers.linear import Linear


class QuantizingMethod(Protocol):
    """What a source asks of the layer's quantization method (method.py's QuantMethod and its kinds):
    written here so that sources need not import the methods that hold them."""

    act_dtype: torch.dtype

    def quantize(self, weight: torch.Tensor, act_dtype: torch.dtype) -> QuantizedWeight: ...


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AutoAWQ GEMM: nibble i of a word holds output column 8 * word + AWQ_ORDER[i]."""


class WeightSource:
    def create(self, layer: Linear, method: QuantizingMethod) -> None:
        layer.quant_device = layer.weight.device

    def device(self, layer: Linear) -> torch.device:
        return layer.quant_device

    def finish(self, layer: Linear, method: QuantizingMethod) -> QuantizedWeight:
        raise NotImplementedError

    def remove(self, layer: Linear) -> None:
        """Drop the loading-time tensors once the shared layout is built."""
        if "weight" in layer._parameters:
            del layer._parameters["weight"]


class DenseSource(WeightSource):
    """A float checkpoint (or dummy weights): the layer keeps its weight until loaded, then rounds it."""

    def finish(self, layer: Linear, method: QuantizingMethod) -> QuantizedWeight:
        return method.quantize(layer.weight.data, method.act_dtype)


class StagedSource(WeightSource):
    slots: dict[str, torch.dtype] = {}
    """Checkpoint tensor name -> dtype it is read in (wide enough that the loader's cast is lossless)."""

    def create(self, layer: Linear, method: QuantizingMethod) -> None:
        super().create(layer, method)
        del layer._parameters["weight"]
        layer.staged = {}
        for name, dtype in self.slots.items():
            slot = nn.Parameter(torch.empty(0, dtype=dtype, device="cpu"), requires_grad=False)
            slot.weight_loader = partial(_stash, layer.staged, name)  # type: ignore[attr-defined]
            layer.register_parameter(name, slot)

    def finish(self, layer: Linear, method: QuantizingMethod) -> QuantizedWeight:
        offsets = getattr(layer, "shard_offsets", {None: (0, layer.out_features)})
        fused = {shard for _, shard in layer.staged} - set(offsets)
        if fused and not any(shard in offsets for _, shard in layer.staged):
            offsets = {fused.pop(): (0, layer.out_features)}  # one tensor of the fused rows (GLM-4's gate_up)
        parts = []
        for shard, (_, size) in offsets.items():
            missing = [name for name in self.slots if (name, shard) not in layer.staged]
            if missing:
                raise ValueError(f"checkpoint lacks {', '.join(missing)} for shard {shard} of a quantized layer")
            tensors = {name: layer.staged[(name, shard)] for name in self.slots}
            parts.append(self.convert(tensors, size, layer.in_features, method))
        return QuantizedWeight(
            torch.cat([p.qweight for p in parts]),
            torch.cat([p.scales for p in parts]),
            None if parts[0].zeros is None else torch.cat([p.zeros for p in parts]),  # type: ignore[misc]
        )

    def remove(self, layer: Linear) -> None:
        for name in self.slots:
            del layer._parameters[name]
        del layer.staged

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        raise NotImplementedError


def _stash(staged: dict, name: str, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | None = None) -> None:
    staged[(name, shard_id)] = loaded


def expect_shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(tensor.shape)}")
    return tensor


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """AutoAWQ's (R, C) int32 -> (R, 8 * C) int32 codes in column order."""
    nibbles = (packed.unsqueeze(-1) >> torch.arange(0, 32, 4, dtype=torch.int32)) & 0xF  # (R, C, 8)
    out = torch.empty_like(nibbles)
    out[..., list(AWQ_ORDER)] = nibbles
    return out.reshape(packed.shape[0], -1)


def pack_awq(codes: torch.Tensor) -> torch.Tensor:
    """(R, 8 * C) codes 0..15 -> AutoAWQ's (R, C) int32 (the inverse of unpack_awq)."""
    r, c = codes.shape[0], codes.shape[1] // 8
    nibbles = codes.to(torch.int64).reshape(r, c, 8)[..., list(AWQ_ORDER)]
    words = (nibbles << torch.arange(0, 32, 4, dtype=torch.int64)).sum(-1)
    return (words - (words >= 2**31).to(torch.int64) * 2**32).to(torch.int32)


class AutoAwqSource(StagedSource):
    """AutoAWQ GEMM: qweight (K, N // 8), qzeros (K // G, N // 8), both packed along N in AWQ_ORDER;
    scales (K // G, N); w = (q - z) * s."""

    slots = {"qweight": torch.int32, "qzeros": torch.int32, "scales": torch.float32}

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        g = method.group_size  # type: ignore[attr-defined]
        q = unpack_awq(expect_shape("qweight", tensors["qweight"], (k, n // 8))).T
        zeros = unpack_awq(expect_shape("qzeros", tensors["qzeros"], (k // g, n // 8))).T
        scales = expect_shape("scales", tensors["scales"], (k // g, n)).T
        return method.from_codes(q.contiguous(), scales.contiguous(), zeros.contiguous())  # type: ignore[attr-defined]


def dequantize_blocks(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Block-wise fp8 (one float32 scale per block of block[0] rows x block[1] columns) to float32."""
    n, k = weight.shape
    rows, cols = -(-n // block[0]), -(-k // block[1])
    expect_shape("weight_scale_inv", scale_inv, (rows, cols))
    scale = scale_inv.float().repeat_interleave(block[0], 0)[:n].repeat_interleave(block[1], 1)[:, :k]
    return weight.float() * scale


class Fp8BlockSource(StagedSource):
    """Block-wise FP8 (DeepSeek / Qwen3-FP8 style): dequantized block by block, then re-rounded with
    one scale per output row (the layout our fp8 kernels read)."""

    slots = {"weight": torch.float8_e4m3fn, "weight_scale_inv": torch.float32}

    def __init__(self, block: tuple[int, int]) -> None:
        self.block = block

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        weight = expect_shape("weight", tensors["weight"], (n, k))
        return quantize_fp8(dequantize_blocks(weight, tensors["weight_scale_inv"], self.block))


class CompressedInt4Source(StagedSource):
    """compressed-tensors pack-quantized int4: codes q + 8 packed along K little nibble first (our
    layout exactly), zero points (if asymmetric) + 8 packed along N; scales (N, K // G)."""

    def __init__(self, symmetric: bool) -> None:
        self.symmetric = symmetric
        self.slots = {"weight_packed": torch.int32, "weight_scale": torch.float32, "weight_shape": torch.int64}
        if not symmetric:
            self.slots["weight_zero_point"] = torch.int32

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        g = method.group_size  # type: ignore[attr-defined]
        check_weight_shape(tensors["weight_shape"], n, k)
        q = ref.unpack_int4(expect_shape("weight_packed", tensors["weight_packed"], (n, k // 8)))
        scales = expect_shape("weight_scale", tensors["weight_scale"], (n, k // g))
        if self.symmetric:
            zeros = torch.full(scales.shape, 8, dtype=torch.uint8)
        else:
            packed_zp = expect_shape("weight_zero_point", tensors["weight_zero_point"], (-(-n // 8), k // g))
            zeros = ref.unpack_int4(packed_zp.T.contiguous())[:, :n].T
        return method.from_codes(q, scales, zeros.contiguous())  # type: ignore[attr-defined]


class CompressedInt8Source(StagedSource):
    """compressed-tensors int8, symmetric: pack-quantized (q + 128 in the bytes of int32 words along K)
    or int-quantized (plain int8); per-channel scales, or per-group ones re-rounded per channel."""

    def __init__(self, packed: bool) -> None:
        self.packed = packed
        if packed:
            self.slots = {"weight_packed": torch.int32, "weight_scale": torch.float32, "weight_shape": torch.int64}
        else:
            self.slots = {"weight": torch.int8, "weight_scale": torch.float32}

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        if self.packed:
            check_weight_shape(tensors["weight_shape"], n, k)
            words = expect_shape("weight_packed", tensors["weight_packed"], (n, -(-k // 4)))
            # little-endian bytes: byte j of word i is element 4 * i + j
            q = (words.contiguous().view(torch.uint8).reshape(n, -1)[:, :k].to(torch.int16) - 128).to(torch.int8)
        else:
            q = expect_shape("weight", tensors["weight"], (n, k))
        scale = tensors["weight_scale"]
        if scale.numel() != n and scale.dim() == 2 and scale.shape[0] == n and k % scale.shape[1] == 0:
            # groups along K (llm-compressor's W8A16): dequantized, then re-rounded per channel
            w = q.float().reshape(n, scale.shape[1], -1) * scale.float()[..., None]
            return quantize_int8(w.reshape(n, k))
        return QuantizedWeight(q.contiguous(), channel_scales(scale, n))


class CompressedFp8Source(StagedSource):
    """compressed-tensors float-quantized fp8: per channel, per tensor, or block-wise scales."""

    slots = {"weight": torch.float8_e4m3fn, "weight_scale": torch.float32}

    def __init__(self, block: tuple[int, int] | None = None) -> None:
        self.block = block

    def convert(self, tensors: dict[str, torch.Tensor], n: int, k: int, method: QuantizingMethod) -> QuantizedWeight:
        weight = expect_shape("weight", tensors["weight"], (n, k))
        if self.block is not None:
            return quantize_fp8(dequantize_blocks(weight, tensors["weight_scale"], self.block))
        scale = tensors["weight_scale"].float()
        if scale.numel() == 1:  # per tensor: already a valid per-channel layout
            return QuantizedWeight(weight.contiguous(), scale.reshape(1).expand(n).contiguous())
        return QuantizedWeight(weight.contiguous(), channel_scales(scale, n))


def channel_scales(scale: torch.Tensor, n: int) -> torch.Tensor:
    if scale.numel() != n:
        raise ValueError(f"weight_scale: expected {n} per-channel scales, got shape {tuple(scale.shape)}")
    return scale.reshape(n).float().contiguous()


def check_weight_shape(shape: torch.Tensor, n: int, k: int) -> None:
    if shape.tolist() != [n, k]:
        raise ValueError(f"weight_shape: expected [{n}, {k}], got {shape.tolist()}")
