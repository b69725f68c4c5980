"""What a `mopt quantize` run ended with, in a few lines a person reads: PASS or FAIL against the gate,
the accuracy figures, what was saved on disk, and the next command. `--json` prints the report instead."""

from __future__ import annotations

import shlex
from pathlib import Path


def folder_bytes(folder: Path) -> int:
    """Bytes of the weight files (*.safetensors) in `folder`."""
    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))


def verdict_lines(report: dict, original_bytes: int | None, folder: Path | None) -> list[str]:
    """The lines to print for a finished run; `folder` is None when nothing was written (the gate refused)
    or when an existing folder was scored (--eval-only)."""
    gate = report["gate"]
    passed = gate["passed"]
    lines = [f"{'PASS' if passed else 'FAIL'} {report['method']}: {_accuracy(report['accuracy'])}{_limits(gate)}"]
    if folder is None:
        return lines  # why it was refused goes to stderr
    saved = report.get("weights_bytes") or folder_bytes(folder)
    size = f"{_mib(saved)} of weights"
    if original_bytes:
        size += f", {saved / original_bytes:.0%} of the original {_mib(original_bytes)} ({_mib(original_bytes - saved)} saved)"
    lines.append(f"wrote {folder}: {size}, in {report.get('seconds', 0):.0f} s")
    lines.append(f"next: mopt serve {shlex.quote(str(folder))}")
    return lines


def _accuracy(acc: dict) -> str:
    if "perplexity" in acc:
        return (
            f"perplexity {acc['reference_perplexity']:.3f} -> {acc['perplexity']:.3f} "
            f"({acc['perplexity_increase']:+.2%}), top-1 agreement {acc['top1_agreement']:.1%}, "
            f"mean KL {acc['mean_kl']:.5f} over {acc['num_tokens']:,} held-out tokens"
        )
    return (
        f"mean cosine to the original vectors {acc['mean_cosine']:.5f} (worst text {acc['min_cosine']:.5f}), "
        f"nearest neighbour kept for {acc['neighbour_agreement']:.1%} of {acc['num_texts']} texts"
    )


def _limits(gate: dict) -> str:
    limits = [f"{name} {gate[key]}" for key, name in LIMITS if gate.get(key) is not None]
    if limits:
        return f" (limits: {', '.join(limits)})"
    return " (no limits set: --max-ppl-increase / --min-top1 refuse a worse result)"


LIMITS = (("max_ppl_increase", "--max-ppl-increase"), ("min_top1", "--min-top1"), ("min_cosine", "--min-cosine"))


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"
