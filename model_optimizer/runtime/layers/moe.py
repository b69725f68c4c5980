"""Mixture-of-experts: a router picks top_k experts per token, stacked expert weights compute them.

Pieces, each usable alone (a new family composes them; DeepSeek's routers: models/deepseek_moe.py):

- `TopKRouter` (checkpoint name `<block>.gate.weight`): logits = x W^T in the model dtype, then
  `route(logits)` -> (weights float32 (tokens, top_k), ids int64 (tokens, top_k)). The default
  `route` is softmax over all experts in float32, top-k, and, with `renormalize`, the k weights
  divided by their sum (Mixtral always; Qwen3-MoE when `norm_topk_prob`). Another routing is a
  subclass overriding `route` and adding its parameters: DeepSeek-V3 scores with a sigmoid, adds
  the loaded `e_score_correction_bias` for the choice only, keeps the best `topk_group` of
  `n_group` groups, takes top-k within them, renormalizes, then multiplies by
  `routed_scaling_factor`. Nothing else here changes for it. On CUDA the default `route` is one
  Triton launch (kernels/moe_routing.py; ties to the lowest expert id), elsewhere the torch ops.
- `FusedExperts` (`<block>.experts`): every expert's gate and up rows stacked in `w13_weight`
  (experts, 2 * intermediate, hidden) and its down projection in `w2_weight` (experts, hidden,
  intermediate), filled from per-expert checkpoint tensors by `weight_loader` with shard ids
  `gate:<e>`, `up:<e>`, `down:<e>`. `expert_stacked_params` declares the checkpoint names (Qwen3
  and DeepSeek: `experts.<e>.gate_proj/up_proj/down_proj`; Mixtral: `experts.<e>.w1/w3/w2`) to the
  loader, exactly as fused q/k/v are declared. forward(x, weights, ids) runs the fused Triton
  kernel on CUDA (kernels/fused_moe.py) and the per-expert loop elsewhere (kernels/moe_reference.py).
  With `bias` it also holds `w13_bias` (experts, 2 * intermediate) and `w2_bias` (experts, hidden), and
  `activation` (a `ClampedSwiglu`) replaces silu(gate) * up: gpt-oss's experts (models/gpt_oss.py, which
  fills them from its stacked checkpoint tensors). Under tensor parallelism only the rank holding the
  first intermediate slice keeps w2_bias (the others hold zeros), so the all_reduce adds it once.
- `SparseMoeBlock`: router, experts, and optional `shared_experts` (any module of x, added to the
  routed sum, as DeepSeek's shared experts or Qwen2-MoE's shared expert). A decoder layer calls
  `forward_after_norm(h, residual, norm)` (its post-attention norm and the block): at a decode step
  of a few tokens on the GPU the norm, the router's matvec and the routing are one launch
  (`TopKRouter.forward_after_norm`, kernels/moe_routing.py `norm_route`). On one rank without shared
  experts the block returns the experts' weighted rows unsummed (layers/expert_rows.py) and the next
  RMSNorm adds them in its kernel.

Tensor parallelism (distributed.py): each rank keeps its 1/tp slice of every expert's intermediate
dimension (the gate and up rows, the down columns), as the dense MLP does, so its routed sum is a
partial sum that one all_reduce completes. With expert parallelism (`get_tp().expert_parallel`,
EngineConfig.enable_expert_parallel) a rank keeps 1/tp of the experts whole instead: it computes
the pairs routed to its own experts, drops the others (their ids fall outside its range), and the
same all_reduce adds the ranks' sums. Either way the router is replicated (experts x hidden is
small) and every rank routes the same tokens the same way.
"""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.distributed import all_reduce, get_tp
from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.kernels.dense_linear import dense_linear
from model_optimizer.runtime.kernels.moe_reference import ClampedSwiglu, fused_moe_ref
from model_optimizer.runtime.layers.expert_rows import ExpertRows
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, materialize, reads_lazily
from model_optimizer.runtime.layers.norm import RMSNorm

MAX_ROUTING_KERNEL_EXPERTS = 256
"""Experts up to which CUDA routes with kernels/moe_routing.py (its MAX_EXPERTS; importing it needs Triton)."""
EXPERT_NAMES = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
"""Per-expert checkpoint names of Qwen-MoE and DeepSeek -> our shard kinds."""
MIXTRAL_EXPERT_NAMES = {"w1": "gate", "w3": "up", "w2": "down"}


def expert_stacked_params(num_experts: int, names: dict[str, str] = EXPERT_NAMES) -> dict[str, tuple[str, str]]:
    """The loader's `stacked_params` entries of per-expert tensors: `.experts.<e>.<name>.` -> the stacked
    parameter (`.experts.w13_` or `.experts.w2_`, completed by the tensor's `weight`) and shard `<kind>:<e>`.
    Put them before a model's dense entries: `.gate_proj.` would also match `.experts.3.gate_proj.`."""
    stacked = {}
    for e in range(num_experts):
        for name, kind in names.items():
            stacked[f".experts.{e}.{name}."] = (".experts.w2_" if kind == "down" else ".experts.w13_", f"{kind}:{e}")
    return stacked


def softmax_topk(logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32, ids int64), each (tokens, top_k): softmax in float32, the k largest, optionally
    divided by their sum (transformers' order of operations)."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class TopKRouter(nn.Module):
    """Scores every expert for each token and keeps the top_k; see the module docstring for `route`."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, renormalize: bool) -> None:
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok must be in 1..{num_experts} (the experts), got {top_k}")
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size))

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kernel = triton_kernel("moe_routing", "softmax_topk_kernel") if aot.on_gpu(logits) else None
        if kernel is None or self.num_experts > MAX_ROUTING_KERNEL_EXPERTS:
            return softmax_topk(logits, self.top_k, self.renormalize)
        return kernel(logits, self.top_k, self.renormalize)  # one launch instead of six

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.route(dense_linear(x, self.weight))  # logits (tokens, experts) in the model dtype

    def forward_after_norm(
        self, h: torch.Tensor, residual: torch.Tensor, norm: RMSNorm
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(norm(h + residual), h + residual, weights, ids) as `norm` then `forward`, in one launch at a
        decode step of a few tokens (kernels/moe_routing.py `norm_route`); None where that kernel does not
        apply (the CPU, more tokens, a subclass routing otherwise): the caller runs the two."""
        if type(self).forward is not TopKRouter.forward or type(self).route is not TopKRouter.route:
            return None
        if not aot.on_gpu(h) or h.dim() != 2 or residual is None:
            return None
        kernel = triton_kernel("moe_routing", "norm_route")
        if kernel is None:
            return None
        return kernel(h, residual, norm.weight, norm.eps, self.weight, self.top_k, self.renormalize)


class FusedExperts(nn.Module):
    """All experts' weights stacked, computed in one fused kernel on the GPU; see the module docstring."""

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        activation: ClampedSwiglu | None = None,
    ) -> None:
        super().__init__()
        tp = get_tp()
        self.num_experts, self.hidden_size = num_experts, hidden_size
        self.full_intermediate_size = intermediate_size
        self.first_expert, self.num_local_experts = tp.experts(num_experts)
        """The experts this rank holds: [first, first + count) (all but under expert parallelism)."""
        self.expert_parallel = tp.expert_parallel and tp.size > 1
        self.intermediate_start, self.intermediate_size = (
            (0, intermediate_size) if self.expert_parallel else tp.shard(intermediate_size, "moe intermediate size")
        )
        """This rank's slice [start, start + size) of each expert's intermediate dimension."""
        local, inter = self.num_local_experts, self.intermediate_size
        self.w13_weight = nn.Parameter(torch.empty(local, 2 * inter, hidden_size))
        self.w2_weight = nn.Parameter(torch.empty(local, hidden_size, inter))
        self.w13_weight.weight_loader = self._load_expert  # type: ignore[attr-defined]
        self.w2_weight.weight_loader = self._load_expert  # type: ignore[attr-defined]
        self.activation = activation
        """None: silu(gate) * up; else gpt-oss's clamped SwiGLU (kernels/moe_reference.py)."""
        if bias:
            self.w13_bias = nn.Parameter(torch.empty(local, 2 * inter))
            self.w2_bias = nn.Parameter(torch.empty(local, hidden_size))
        else:
            self.w13_bias = self.w2_bias = None

    @reads_lazily
    def _load_expert(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        kind, _, index = (shard_id or "").partition(":")
        if kind not in ("gate", "up", "down") or not index.isdigit() or int(index) >= self.num_experts:
            raise ValueError(f"unknown expert shard {shard_id!r}; expected gate|up|down:<0..{self.num_experts - 1}>")
        expert, full, local = int(index) - self.first_expert, self.full_intermediate_size, self.intermediate_size
        expected = (self.hidden_size, full) if kind == "down" else (full, self.hidden_size)
        if tuple(loaded.shape) != expected:
            raise ValueError(f"expected shape {expected} for expert {kind} projection, got {tuple(loaded.shape)}")
        if not 0 <= expert < self.num_local_experts:
            return  # another rank's expert (expert parallelism): not even read
        if kind == "down":  # (hidden, intermediate): this rank's columns
            target, part = param.data[expert], loaded.narrow(1, self.intermediate_start, local)
        else:  # gate rows first, then up rows
            target = param.data[expert].narrow(0, 0 if kind == "gate" else local, local)
            part = loaded.narrow(0, self.intermediate_start, local)
        target.copy_(materialize(part, param.dtype))

    def checkpoint_tensor(self, param: nn.Parameter, shard_id: str) -> torch.Tensor:
        """The per-expert checkpoint tensor `shard_id` (gate|up|down:<e>) of a whole model (writers of
        checkpoints: model/quantize/writer.py); the inverse of the weight_loader on one device. A subclass
        filled from another layout (gpt-oss's stacked tensors) overrides it with the inverse of its own."""
        self.require_whole()
        kind, _, index = shard_id.partition(":")
        expert, size = int(index), self.intermediate_size
        if kind == "down":
            return self.w2_weight.data[expert]
        return self.w13_weight.data[expert].narrow(0, 0 if kind == "gate" else size, size)

    def require_whole(self) -> None:
        """ValueError unless this rank holds every expert whole: a checkpoint is written from the whole model."""
        if self.num_local_experts != self.num_experts or self.intermediate_size != self.full_intermediate_size:
            raise ValueError("a checkpoint is written from the whole model, not a tensor-parallel shard")

    def forward(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, summed: bool = True
    ) -> torch.Tensor | ExpertRows:
        """x (tokens, hidden) -> this rank's part of sum_k weight_k * expert_k(x), (tokens, hidden); with
        `summed` False the kernel path leaves the sum to the next norm (layers/expert_rows.py)."""
        if self.first_expert:  # ids of other ranks' experts fall outside [0, local experts): dropped
            topk_ids = topk_ids - self.first_expert
        kernel = triton_kernel("fused_moe", "fused_moe") if aot.on_gpu(x) else None
        if kernel is None:
            return fused_moe_ref(
                x, self.w13_weight, self.w2_weight, topk_weights, topk_ids, self.w13_bias, self.w2_bias, self.activation
            )
        extra = {}  # gpt-oss's biases and activation; none: the call (and kernel) of every other model
        if self.w13_bias is not None:
            extra.update(w13_bias=self.w13_bias, w2_bias=self.w2_bias)
        if self.activation is not None:
            extra.update(activation=self.activation)
        out = kernel(
            x,
            self.w13_weight,
            self.w2_weight,
            topk_weights,
            topk_ids,
            all_ids_local=not self.expert_parallel,
            summed=summed,
            **extra,
        )
        return out if summed or topk_ids.shape[1] == 1 else ExpertRows(out, topk_ids.shape[1])


class SparseMoeBlock(nn.Module):
    """router -> experts (-> + shared experts): the MLP of a mixture-of-experts decoder layer."""

    def __init__(self, gate: TopKRouter, experts: FusedExperts, shared_experts: nn.Module | None = None) -> None:
        super().__init__()
        self.gate, self.experts = gate, experts
        self.shared_experts = shared_experts

    def forward(self, x: torch.Tensor) -> torch.Tensor | ExpertRows:
        """The routed sum (+ shared experts); alone on one rank, the unsummed rows (layers/expert_rows.py)."""
        topk_weights, topk_ids = self.gate(x)
        return self._experts(x, topk_weights, topk_ids)

    def forward_after_norm(
        self, h: torch.Tensor, residual: torch.Tensor | None, norm: RMSNorm
    ) -> tuple[torch.Tensor | ExpertRows, torch.Tensor]:
        """(self(norm(h + residual)), h + residual): the layer's post-attention norm and this block, the norm
        and the routing in one launch where the router can (`TopKRouter.forward_after_norm`)."""
        routed = self.gate.forward_after_norm(h, residual, norm)
        if routed is None:
            x, residual = norm(h, residual)
            return self(x), residual
        x, residual, topk_weights, topk_ids = routed
        return self._experts(x, topk_weights, topk_ids), residual

    def _experts(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
    ) -> torch.Tensor | ExpertRows:
        if self.shared_experts is None and get_tp().size == 1:
            return self.experts(x, topk_weights, topk_ids, summed=False)
        out = all_reduce(self.experts(x, topk_weights, topk_ids))
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out
