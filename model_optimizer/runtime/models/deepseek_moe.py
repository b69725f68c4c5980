"""DeepSeek's mixture of experts: its two routings, shared experts beside the routed ones.

Both routers score in float32 from a float32 weight (transformers keeps `gate.weight` in float32 even
in a bf16 model), under the checkpoint names `mlp.gate.weight` and, for V3, `mlp.gate.e_score_correction_bias`.

- DeepSeek-V2 (`DeepseekV2Router`): softmax over all experts; `topk_method` "greedy" takes the top-k,
  "group_limited_greedy" first keeps the `topk_group` of `n_group` expert groups with the best
  single score and takes the top-k within them; the k weights are always multiplied by
  `routed_scaling_factor` and never renormalized, as in transformers 5 (our reference), which reads no
  `norm_topk_prob` for V2. DeepSeek's own code instead divides by the sum (and skips the scaling) when
  norm_topk_prob and k > 1; every published V2 config (V2, V2-Lite, V2.5) has norm_topk_prob false,
  where both give the same weights.
- DeepSeek-V3 (`DeepseekV3Router`, GLM-4.5's and GLM-4.7-Flash's too): sigmoid scores; the choice adds the loaded
  `e_score_correction_bias` (choice only: the weights are the plain scores), keeps the `topk_group`
  of `n_group` groups whose two best biased scores sum highest, and takes the top-k within them;
  the k scores are divided by their sum (+1e-20) when `norm_topk_prob`, then always multiplied by
  `routed_scaling_factor`.

The experts and their kernel are layers/moe.py's; `n_shared_experts` shared experts are one dense MLP
of n_shared_experts * moe_intermediate_size channels every token runs, added to the routed sum.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.layers.moe import FusedExperts, SparseMoeBlock, TopKRouter
from model_optimizer.runtime.models.llama import DecoderMLP
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.moe_args import MoeArgs, moe_args_for

V2_TOPK_METHODS = ("greedy", "group_limited_greedy")


def deepseek_moe_args(hf: dict) -> MoeArgs:
    """The experts of a DeepSeek-V2/V3, GLM-4.5 or GLM-4.7-Flash config (moe_args_for's rule: V2 ignores
    norm_topk_prob)."""
    moe = moe_args_for(hf)
    if moe is None:
        raise ValueError(f"not a DeepSeek-V2/V3 or GLM-4.5 config: architectures {hf.get('architectures')}")
    return moe


def _groups(hf: dict, num_experts: int, top_k: int) -> tuple[int, int]:
    """(n_group, topk_group), checked: groups of equal size, enough experts in the kept groups."""
    n_group, topk_group = hf.get("n_group") or 1, hf.get("topk_group") or 1
    for key, value in (("n_group", n_group), ("topk_group", topk_group)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"config.json: {key!r} must be a positive integer, got {value!r}")
    if num_experts % n_group or topk_group > n_group:
        raise ValueError(
            f"config.json: {num_experts} experts cannot form n_group {n_group} equal groups with "
            f"topk_group {topk_group} of them kept (topk_group must be at most n_group)"
        )
    if top_k > topk_group * (num_experts // n_group):
        raise ValueError(
            f"config.json: num_experts_per_tok {top_k} exceeds the experts of the {topk_group} kept groups"
        )
    return n_group, topk_group


def keep_best_groups(choice: torch.Tensor, group_scores: torch.Tensor, topk_group: int, fill: float) -> torch.Tensor:
    """`choice` (tokens, experts) with the experts outside each token's `topk_group` best groups set to `fill`."""
    n_group = group_scores.shape[-1]
    kept = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]  # (tokens, topk_group)
    mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0).bool()  # (tokens, n_group)
    mask = mask.unsqueeze(-1).expand(-1, n_group, choice.shape[-1] // n_group).reshape(choice.shape)
    return choice.masked_fill(~mask, fill)


class DeepseekV2Router(TopKRouter):
    def __init__(self, hidden_size: int, moe: MoeArgs, hf: dict) -> None:
        super().__init__(hidden_size, moe.num_experts, moe.top_k, moe.renormalize)
        self.weight = nn.Parameter(torch.empty(moe.num_experts, hidden_size, dtype=torch.float32))
        self.routed_scaling_factor = float(hf.get("routed_scaling_factor", 1.0))
        self.topk_method = hf.get("topk_method") or "greedy"
        if self.topk_method not in V2_TOPK_METHODS:
            raise ValueError(
                f"config.json: topk_method {self.topk_method!r} is not supported; supported: {V2_TOPK_METHODS}"
            )
        self.n_group, self.topk_group = _groups(hf, moe.num_experts, moe.top_k)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.route(F.linear(x.float(), self.weight.float()))  # logits (tokens, experts) in float32

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = logits.softmax(dim=-1, dtype=torch.float32)
        if self.topk_method == "group_limited_greedy":
            group_best = scores.view(-1, self.n_group, self.num_experts // self.n_group).amax(dim=-1)
            scores = keep_best_groups(scores, group_best, self.topk_group, 0.0)
        weights, ids = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        return weights * self.routed_scaling_factor, ids


class DeepseekV3Router(DeepseekV2Router):
    def __init__(self, hidden_size: int, moe: MoeArgs, hf: dict) -> None:
        super().__init__(hidden_size, moe, {**hf, "topk_method": "greedy"})
        if self.num_experts // self.n_group < 2:
            raise ValueError(
                f"config.json: groups of {self.num_experts // self.n_group} expert; V3 scores a group by its best two"
            )
        self.e_score_correction_bias = nn.Parameter(torch.zeros(moe.num_experts, dtype=torch.float32))

    def route(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = logits.sigmoid()
        choice = scores + self.e_score_correction_bias  # for choosing only
        group_size = self.num_experts // self.n_group
        group_scores = choice.view(-1, self.n_group, group_size).topk(2, dim=-1)[0].sum(dim=-1)
        choice = keep_best_groups(choice, group_scores, self.topk_group, float("-inf"))
        ids = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        if self.renormalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.routed_scaling_factor, ids


def deepseek_moe_block(args: DecoderArgs) -> SparseMoeBlock:
    """Router, routed experts and the shared experts (if any) of a sparse layer."""
    moe = deepseek_moe_args(args.hf)
    router_cls = DeepseekV2Router if args.architecture == "DeepseekV2ForCausalLM" else DeepseekV3Router
    shared = None
    if moe.num_shared_experts:
        shared = DecoderMLP(replace(args, intermediate_size=moe.intermediate_size * moe.num_shared_experts))
    return SparseMoeBlock(
        router_cls(args.hidden_size, moe, args.hf),
        FusedExperts(moe.num_experts, args.hidden_size, moe.intermediate_size),
        shared,
    )
