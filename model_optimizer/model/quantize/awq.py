"""Activation-aware weight quantization (AWQ, Lin et al. 2023) for W4A16 in groups along K.

Layer by layer over calibration activations: for each set of linears that read the same input, pick
per-input-channel scales s (W * s, previous op / s: the float function is unchanged) that minimise
the error of the int4-rounded output; then, per group, shrink the clipping range where that lowers
the output error. The identity scale is always a candidate, so no layer ends worse than rounding
to nearest on the calibration data. The result is still a float model; `quantize_int4` rounds it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.model.quantize.forward import prefill_inputs
from model_optimizer.runtime.layers.quantization.quantizers import fake_quantize_int4

NUM_GRID = 20
LOSS_TOKENS = 4096  # tokens the scale search scores on
CLIP_TOKENS = 512  # tokens the clipping search scores on
CLIP_MIN_RATIO = 0.5
ROW_CHUNK = 1024


def _subsample(x: torch.Tensor, n: int) -> torch.Tensor:
    if len(x) <= n:
        return x
    return x[torch.linspace(0, len(x) - 1, n).long().to(x.device)]


def search_scales(
    x: torch.Tensor, weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype, score: Callable | None = None
) -> torch.Tensor:
    """(K,) scales for the linears of `weight` (N, K) that read x (T, K); score(w) -> output to match."""
    x = x.float()
    w = weight.float()
    x_sub = _subsample(x, LOSS_TOKENS)
    score = score or (lambda wq: x_sub @ wq.T)
    reference = score(w)
    x_mean = x.abs().mean(0)
    n, k = w.shape
    grouped = w.abs().reshape(n, k // group_size, group_size)
    w_mean = (grouped / grouped.amax(-1, keepdim=True).clamp(min=1e-8)).reshape(n, k).mean(0)
    candidates = [torch.ones(k, device=w.device)]
    for i in range(NUM_GRID):
        ratio = i / NUM_GRID
        candidates.append(x_mean.pow(ratio).clamp(min=1e-4))  # activations only
        candidates.append((x_mean.pow(ratio) / w_mean.pow(1 - ratio).clamp(min=1e-4)).clamp(min=1e-4))
    best, best_loss = candidates[0], float("inf")
    for s in candidates:
        s = s / (s.max() * s.min()).sqrt()
        wq = fake_quantize_int4(w * s, group_size, scale_dtype) / s
        loss = (score(wq) - reference).pow(2).mean().item()
        if loss < best_loss:
            best, best_loss = s, loss
    return best


def search_clip(x: torch.Tensor, weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype) -> torch.Tensor:
    """`weight` with each group's range shrunk (ratio 1 .. 0.5) where the group's output error drops."""
    x_g = _subsample(x.float(), CLIP_TOKENS).T.reshape(-1, group_size, min(len(x), CLIP_TOKENS))  # (groups, G, T)
    out = []
    for rows in weight.float().split(ROW_CHUNK):
        n = rows.shape[0]
        w_g = rows.reshape(n, -1, group_size)  # (n, groups, G)
        reference = torch.einsum("ngk,gkt->ngt", w_g, x_g)
        lo, hi = w_g.amin(-1, keepdim=True).clamp(max=0), w_g.amax(-1, keepdim=True).clamp(min=0)
        best_ratio = torch.ones(n, w_g.shape[1], 1, device=rows.device)
        best_err = torch.full((n, w_g.shape[1], 1), float("inf"), device=rows.device)
        for i in range(NUM_GRID):
            ratio = 1 - (1 - CLIP_MIN_RATIO) * i / NUM_GRID
            clipped = torch.maximum(torch.minimum(w_g, hi * ratio), lo * ratio)
            wq = fake_quantize_int4(clipped.reshape(n, -1), group_size, scale_dtype).reshape(w_g.shape)
            err = (torch.einsum("ngk,gkt->ngt", wq, x_g) - reference).pow(2).mean(-1, keepdim=True)
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            best_ratio = torch.where(better, torch.full_like(best_ratio, ratio), best_ratio)
        out.append(torch.maximum(torch.minimum(w_g, hi * best_ratio), lo * best_ratio).reshape(n, -1))
    return torch.cat(out).to(weight.dtype)


class _Capture:
    """Forward pre-hooks keeping the input of named linears for one layer's pass."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        self.inputs: dict[str, torch.Tensor] = {}
        self.handles = [m.register_forward_pre_hook(self._hook(name)) for name, m in modules.items()]

    def _hook(self, name: str):
        def hook(module, args):
            self.inputs[name] = args[0].detach()

        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@torch.no_grad()
def apply_awq(
    model: nn.Module,
    windows: list[list[int]],
    group_size: int,
    scale_dtype: torch.dtype,
    on_layer: Callable[[int], None] | None = None,
) -> None:
    """Rescale and clip the float weights of every decoder layer in place. The model may be loaded in
    any float dtype: each layer is searched, folded and run in float32, one at a time, and cast back to
    its own dtypes after, so only one layer at a time is held in float32."""
    check_awq_layout(model)
    check_awq_groups(model, group_size)
    device = next(model.parameters()).device
    token_ids, positions, meta = prefill_inputs(windows, model, device, torch.float32)
    x, residual = model.model.embed_tokens(token_ids).float(), None
    for index, layer in enumerate(model.model.layers):
        restore = _in_float32(layer)
        attn, mlp = layer.self_attn, layer.mlp
        capture = _Capture({"qkv": attn.qkv_proj, "o": attn.o_proj, "gate_up": mlp.gate_up_proj, "down": mlp.down_proj})
        layer(positions, x, residual, meta)
        capture.close()
        inputs = capture.inputs
        _fold(
            layer.input_layernorm.weight,
            attn.qkv_proj.weight,
            search_scales(inputs["qkv"], attn.qkv_proj.weight, group_size, scale_dtype),
        )
        s = _mlp_scales(mlp, inputs["gate_up"], group_size, scale_dtype)
        _fold(layer.post_attention_layernorm.weight, mlp.gate_up_proj.weight, s)
        x_gate_up = inputs["gate_up"] / s
        up_offset, up_size = mlp.gate_up_proj.shard_offsets["up"]
        s = search_scales(inputs["down"], mlp.down_proj.weight, group_size, scale_dtype)
        _fold(mlp.gate_up_proj.weight[up_offset : up_offset + up_size], mlp.down_proj.weight, s)
        x_down = inputs["down"] / s
        # q and k are not clipped (attention scores are sensitive to them), as in AutoAWQ
        for linear, x_in in ((attn.o_proj, inputs["o"]), (mlp.gate_up_proj, x_gate_up), (mlp.down_proj, x_down)):
            linear.weight.copy_(search_clip(x_in, linear.weight, group_size, scale_dtype))
        meta.kv_caches = [torch.zeros_like(c) for c in meta.kv_caches]
        x, residual = layer(positions, x, residual, meta)  # the next layer sees this layer's new output
        restore()
        if on_layer:
            on_layer(index)


def _in_float32(module: nn.Module) -> Callable[[], None]:
    """Cast the module's float parameters and buffers to float32; the returned call casts each back."""
    tensors = [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]
    dtypes = [t.dtype for t in tensors]
    for t in tensors:
        t.data = t.data.float()

    def restore() -> None:
        for t, dtype in zip(tensors, dtypes):
            t.data = t.data.to(dtype)

    return restore


def check_awq_layout(model: nn.Module) -> None:
    """ValueError unless every layer is the Llama layout the scale folding assumes: a norm whose output
    feeds q/k/v, one feeding a dense gate/up MLP (GLM-4's extra norms sit after those outputs: fine).
    Mixtures of experts and Gemma's (1 + w) sandwich norms are not, yet."""
    from model_optimizer.runtime.models.llama import DecoderLayer, DecoderMLP

    arch = getattr(getattr(model, "args", None), "architecture", type(model).__name__)
    for index, layer in enumerate(model.model.layers):
        if not isinstance(layer, DecoderLayer) or not isinstance(layer.mlp, DecoderMLP):
            raise ValueError(
                f"awq does not support {arch} yet (layer {index} is a {type(layer.mlp).__name__} "
                f"in a {type(layer).__name__}); use --method rtn-int4, int8 or fp8"
            )


def check_awq_groups(model: nn.Module, group_size: int) -> None:
    """The int4 group rule rounding applies later (quantizers.check_group_size), checked before the
    search: its reshapes into groups would otherwise fail inside the first layer with torch's error."""
    from model_optimizer.runtime.layers.quantization.quantizers import check_group_size

    for index, layer in enumerate(model.model.layers):
        for name, linear in (
            ("self_attn.qkv_proj", layer.self_attn.qkv_proj),
            ("self_attn.o_proj", layer.self_attn.o_proj),
            ("mlp.gate_up_proj", layer.mlp.gate_up_proj),
            ("mlp.down_proj", layer.mlp.down_proj),
        ):
            try:
                check_group_size(linear.weight.shape[1], group_size)
            except ValueError as exc:
                raise ValueError(f"model.layers.{index}.{name}: {exc}") from None


def _fold(previous: torch.Tensor, weight: torch.Tensor, s: torch.Tensor) -> None:
    """previous / s (its rows, a norm's channels), weight * s (its input columns): the same function."""
    previous.div_(s if previous.dim() == 1 else s[:, None])
    weight.mul_(s)


def _mlp_scales(mlp: nn.Module, x: torch.Tensor, group_size: int, dtype: torch.dtype) -> torch.Tensor:
    """gate_up's scales scored on the MLP's output (through SiLU and the float down projection)."""
    x_sub = _subsample(x.float(), LOSS_TOKENS)
    down = mlp.down_proj.weight.float()

    def score(w: torch.Tensor) -> torch.Tensor:
        return F.linear(mlp.act(x_sub @ w.T), down)

    return search_scales(x, mlp.gate_up_proj.weight, group_size, dtype, score)
