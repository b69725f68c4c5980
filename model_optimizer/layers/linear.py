"""Linear layers whose parameters load themselves, including fused projections declared by shards.

A fused layer (q, k and v into one matmul; gate and up into another) lists its shards; the
checkpoint's separate tensors land in their slice through the parameter's `weight_loader`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def default_weight_loader(param: nn.Parameter, loaded: torch.Tensor, shard_id: str | None = None) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"expected shape {tuple(param.shape)}, got {tuple(loaded.shape)}")
    param.data.copy_(loaded)


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.weight.weight_loader = default_weight_loader  # type: ignore[attr-defined]
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
            self.bias.weight_loader = default_weight_loader  # type: ignore[attr-defined]
        self.quant_method = None
        """Set by model_optimizer.quant before weights load: it owns the weights and the matmul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x)
        return F.linear(x, self.weight, self.bias)


class MergedLinear(Linear):
    """Several projections of the same input in one matmul; shard i fills rows [offset_i, offset_i + size_i)."""

    def __init__(self, in_features: int, shard_sizes: dict[str, int], bias: bool = False) -> None:
        super().__init__(in_features, sum(shard_sizes.values()), bias)
        self.shard_offsets: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, size in shard_sizes.items():
            self.shard_offsets[name] = (offset, size)
            offset += size
        self.weight.weight_loader = self._load_shard  # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.weight_loader = self._load_shard  # type: ignore[attr-defined]

    def _load_shard(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | None = None) -> None:
        if shard_id not in self.shard_offsets:
            raise ValueError(f"unknown shard {shard_id!r}; expected one of {list(self.shard_offsets)}")
        offset, size = self.shard_offsets[shard_id]
        target = param.data.narrow(0, offset, size)
        if target.shape != loaded.shape:
            raise ValueError(f"expected shape {tuple(target.shape)} for shard {shard_id}, got {tuple(loaded.shape)}")
        target.copy_(loaded)
