"""Accuracy of a quantized folder against its original, measured with our own engine on held-out text.

Both folders load through `LLM` (the loader, quantization and model runner that serve them); each
evaluation window is prefilled through the runner's model and every position's next-token
distribution is compared: perplexity of each, top-1 agreement, mean KL(original || quantized).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from model_optimizer.model.quantize.forward import window_logits


@dataclass
class Accuracy:
    num_windows: int
    num_tokens: int
    """Predicted positions scored (each window's tokens after the first)."""
    reference_perplexity: float
    perplexity: float
    perplexity_increase: float
    """perplexity / reference_perplexity - 1 (0.02: 2% worse)."""
    top1_agreement: float
    """Fraction of positions where both models' most likely next token is the same."""
    mean_kl: float
    """Mean KL(original || quantized) of the next-token distributions, in nats."""

    def to_dict(self) -> dict:
        return asdict(self)


def load_for_eval(folder: str | Path, device: str, dtype: str, max_len: int):
    """A model through the engine's runner with a cache just large enough for one window."""
    from model_optimizer import LLM

    blocks = -(-max_len // 16) + 1
    llm = LLM(
        str(folder),
        device=device,
        dtype=dtype,
        num_kv_blocks=blocks,
        max_model_len=max_len,
        max_num_seqs=1,
        enforce_eager=True,
    )
    return llm


def compare(
    reference,
    quantized,
    windows: list[list[int]],
    on_window: Callable[[int], None] | None = None,
) -> Accuracy:
    """`reference` and `quantized` are LLM objects (their runners' models are compared)."""
    ref_model, q_model = reference.runner.model, quantized.runner.model
    device = reference.runner.device
    nll_ref = nll_q = kl = 0.0
    agree = count = 0
    for i, window in enumerate(windows):
        targets = torch.tensor(window[1:], device=device)
        logp_r = torch.log_softmax(window_logits(ref_model, window, device)[:-1], dim=-1)
        logp_q = torch.log_softmax(window_logits(q_model, window, quantized.runner.device)[:-1].to(device), dim=-1)
        nll_ref -= logp_r.gather(1, targets[:, None]).sum().item()
        nll_q -= logp_q.gather(1, targets[:, None]).sum().item()
        agree += (logp_r.argmax(-1) == logp_q.argmax(-1)).sum().item()
        kl += (logp_r.exp() * (logp_r - logp_q)).sum().item()
        count += len(targets)
        if on_window:
            on_window(i)
    ppl_ref, ppl_q = math.exp(nll_ref / count), math.exp(nll_q / count)
    return Accuracy(
        num_windows=len(windows),
        num_tokens=count,
        reference_perplexity=ppl_ref,
        perplexity=ppl_q,
        perplexity_increase=ppl_q / ppl_ref - 1,
        top1_agreement=agree / count,
        mean_kl=kl / count,
    )


def gate_failures(acc: Accuracy, max_ppl_increase: float | None, min_top1: float | None) -> list[str]:
    """Plain-words reasons the result is refused (empty: it passes)."""
    failures = []
    # `not <=` and `not >=`: a NaN figure (a model that computes NaN) breaks every limit, never passes it
    if max_ppl_increase is not None and not acc.perplexity_increase <= max_ppl_increase:
        failures.append(
            f"perplexity rose {acc.perplexity_increase:.2%} ({acc.reference_perplexity:.3f} -> {acc.perplexity:.3f}), "
            f"above --max-ppl-increase {max_ppl_increase:g}"
        )
    if min_top1 is not None and not acc.top1_agreement >= min_top1:
        failures.append(f"top-1 agreement {acc.top1_agreement:.4f} is below --min-top1 {min_top1:g}")
    return failures
