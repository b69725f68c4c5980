"""Linear layers whose parameters load themselves, including fused projections declared by shards.

A fused layer (q, k and v into one matmul; gate and up into another) lists its shards; the
checkpoint's separate tensors land in their slice through the parameter's `weight_loader`.

Tensor parallelism (distributed.py) splits two kinds of layer, read from `get_tp()` when built:
a fused layer is column-parallel (each rank keeps its rows of every shard, so its output is this
rank's heads or intermediate channels and needs no communication), and `RowParallelLinear` keeps
its columns of the input dimension, so each rank's product is a partial sum that one `all_reduce`
completes. On one device both are exactly the plain layers: same shapes, same numbers.

Each weight_loader narrows its slice from the checkpoint tensor before reading it (a LazyTensor
from the loader, layers/lazy_tensor.py), so no rank reads a whole tensor it keeps a part of.
"""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.distributed import all_reduce, get_tp
from model_optimizer.runtime.kernels.dense_linear import dense_linear, dense_linear_gated
from model_optimizer.runtime.layers.activation import silu_and_mul
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, materialize, reads_lazily


@reads_lazily
def default_weight_loader(param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"expected shape {tuple(param.shape)}, got {tuple(loaded.shape)}")
    param.data.copy_(materialize(loaded, param.dtype))


class Linear(nn.Module):
    """y = x W^T + b with the whole W on every rank (replicated)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        """This rank's sizes: what quantization methods size their weights from."""
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.weight.weight_loader = default_weight_loader  # type: ignore[attr-defined]
        self.bias = None
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
            self.bias.weight_loader = default_weight_loader  # type: ignore[attr-defined]
        self.quant_method = None
        """Set by model_optimizer.model.quantize before weights load: it owns the weights and the matmul."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_method is not None:
            return self.quant_method.apply(self, x)
        return dense_linear(x, self.weight, self.bias)  # F.linear, or our kernel where it measured faster

    def forward_gated(self, x: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up of this [gate | up] projection: in the matmul's launch where our GEMV runs it
        (bf16: kernels/dense_linear.py; quantized: the method's `apply_gated`), else the projection then
        `silu_and_mul`. A module with hooks (a calibration reading its output) always takes the two
        steps, through its call."""
        if not (self._forward_hooks or self._forward_pre_hooks):
            if self.quant_method is None:
                out = dense_linear_gated(x, self.weight, self.bias)
            else:
                out = self.quant_method.apply_gated(self, x)
            if out is not None:
                return out
        return silu_and_mul(self(x))


class MergedLinear(Linear):
    """Several projections of the same input in one matmul; shard i fills rows [offset_i, offset_i + size_i).

    Column-parallel: of each shard's `shard_sizes[name]` checkpoint rows this rank keeps `rows[name]`
    = (start, length), by default its equal share (`get_tp().shard`); the k and v of attention pass
    their KV heads' rows instead, which ranks may share (distributed.py's `kv_heads`).
    """

    def __init__(
        self,
        in_features: int,
        shard_sizes: dict[str, int],
        bias: bool = False,
        rows: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        tp = get_tp()
        rows = rows or {name: tp.shard(size, f"{name} output size") for name, size in shard_sizes.items()}
        super().__init__(in_features, sum(length for _, length in rows.values()), bias)
        self.shard_sizes = dict(shard_sizes)
        self.shard_rows = rows
        """Shard name -> (first checkpoint row, number of rows) this rank holds."""
        self.shard_offsets: dict[str, tuple[int, int]] = {}
        """Shard name -> (offset, size) of its rows in this rank's weight."""
        offset = 0
        for name in shard_sizes:
            self.shard_offsets[name] = (offset, rows[name][1])
            offset += rows[name][1]
        self.weight.weight_loader = self._load_shard  # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.weight_loader = self._load_shard  # type: ignore[attr-defined]

    @reads_lazily
    def _load_shard(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        if shard_id not in self.shard_offsets:
            raise ValueError(f"unknown shard {shard_id!r}; expected one of {list(self.shard_offsets)}")
        offset, size = self.shard_offsets[shard_id]
        target = param.data.narrow(0, offset, size)
        expected = (self.shard_sizes[shard_id], *target.shape[1:])
        if tuple(loaded.shape) != expected:
            raise ValueError(f"expected shape {expected} for shard {shard_id}, got {tuple(loaded.shape)}")
        start, length = self.shard_rows[shard_id]
        target.copy_(materialize(loaded.narrow(0, start, length), param.dtype))


class RowParallelLinear(Linear):
    """A Linear whose input dimension is split over the ranks: each keeps its `in_features / tp` columns
    of W (the matching slice of the input is what the column-parallel layer before it produced) and
    one all_reduce sums the partial products. The bias is held by rank 0 only (zeros elsewhere), so
    the sum adds it exactly once, whether a quantization method or F.linear does the matmul."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        tp = get_tp()
        self.input_start, local_in = tp.shard(in_features, "input size")
        super().__init__(local_in, out_features, bias)
        self.full_in_features = in_features
        self.weight.weight_loader = self._load_weight  # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.weight_loader = self._load_bias  # type: ignore[attr-defined]

    @reads_lazily
    def _load_weight(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        expected = (self.out_features, self.full_in_features)
        if tuple(loaded.shape) != expected:
            raise ValueError(f"expected shape {expected}, got {tuple(loaded.shape)}")
        param.data.copy_(materialize(loaded.narrow(1, self.input_start, self.in_features), param.dtype))

    @reads_lazily
    def _load_bias(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        if param.shape != loaded.shape:
            raise ValueError(f"expected shape {tuple(param.shape)}, got {tuple(loaded.shape)}")
        if get_tp().rank == 0:
            param.data.copy_(materialize(loaded, param.dtype))
        else:
            param.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return all_reduce(super().forward(x))
