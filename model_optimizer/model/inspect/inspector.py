"""`inspect_checkpoint`: read a checkpoint without loading it and list what will break.

The steps: read the JSON files, tokenizer facts and safetensors headers; take the census; run the
engine's loader rules over the keys as they are and as `--fix` would leave them; apply the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_optimizer.environment.findings import SEVERITY_RANK, Finding
from model_optimizer.model.inspect import cleaning, rules_generation, rules_layout, rules_tokens, rules_weights
from model_optimizer.model.inspect.census import Census, take_census
from model_optimizer.model.inspect.checkpoint import Checkpoint, read_checkpoint
from model_optimizer.model.inspect.consumption import LoadCheck, check_loading
from model_optimizer.model.inspect.context import InspectContext

RULES = rules_weights.RULES + rules_layout.RULES + rules_tokens.RULES + rules_generation.RULES


@dataclass
class InspectReport:
    checkpoint: Checkpoint
    census: Census
    raw_check: LoadCheck
    clean_check: LoadCheck
    findings: list[Finding]
    memory_plan: Any = None
    """A MemoryPlan when one was asked for."""
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error (the engine would fail or misbehave), else 0."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        cfg = self.checkpoint.config
        status = max((f.severity for f in self.findings), key=SEVERITY_RANK.get, default="ok")
        return {
            "schema_version": 1,
            "folder": str(self.checkpoint.folder),
            "status": status,
            "exit_code": self.exit_code,
            "model": {
                "architecture": (cfg.get("architectures") or [None])[0],
                "model_type": cfg.get("model_type"),
                "model_class": self.raw_check.model_class,
                "num_layers": cfg.get("num_hidden_layers"),
                "hidden_size": cfg.get("hidden_size"),
                "vocab_size": cfg.get("vocab_size"),
                "max_position_embeddings": cfg.get("max_position_embeddings"),
                "torch_dtype": cfg.get("torch_dtype") or cfg.get("dtype"),
            },
            "census": self.census.to_dict(),
            "load_check": {"as_is": _check_dict(self.raw_check), "after_fix": _check_dict(self.clean_check)},
            "findings": [f.to_dict() for f in self.findings],
            "memory_plan": self.memory_plan.to_dict() if self.memory_plan is not None else None,
            "timings_s": self.timings_s,
        }


def _check_dict(check: LoadCheck) -> dict[str, Any]:
    return {
        "loads": check.loads,
        "error": check.error,
        "consumed": check.consumed,
        "unexpected": check.unexpected,
        "missing": check.missing,
        "misshapen": check.misshapen,
        "skipped": check.skipped,
        "quantized": check.quantized,
        "quantization": check.quantization,
        "num_params": check.num_params,
    }


def inspect_checkpoint(folder: str | Path, max_model_len: int | None = None) -> InspectReport:
    import time

    start = time.perf_counter()
    checkpoint = read_checkpoint(folder)
    read_s = time.perf_counter() - start
    raw_check = check_loading(checkpoint.config, [(t.name, t.shape) for t in checkpoint.tensors])
    census = take_census(checkpoint.tensors, checkpoint.config, raw_check.tied_embeddings)
    junk: list[str] = []
    try:
        cleaning.check_lora(checkpoint)
        cleaned = cleaning.cleaned_tensors(checkpoint)
        junk = [cleaned[name].name for name in cleaning.junk_names(checkpoint, cleaned)]
        clean_check = check_loading(cleaning.clean_config(checkpoint), cleaning.clean_keys(checkpoint))
    except ValueError as exc:
        clean_check = LoadCheck(architecture=raw_check.architecture, error=str(exc))
    ctx = InspectContext(checkpoint, census, raw_check, clean_check, max_model_len, junk)
    findings = [finding for rule in RULES for finding in rule(ctx)]
    if clean_check.error and clean_check.error != raw_check.error:
        findings.append(
            Finding(
                "fix.impossible",
                "error",
                f"--fix cannot clean this checkpoint: {clean_check.error}",
                "Two keys clean to one name, or a LoRA adapter does not match its weight.",
            )
        )
    findings.sort(key=lambda f: -SEVERITY_RANK[f.severity])
    return InspectReport(
        checkpoint,
        census,
        raw_check,
        clean_check,
        findings,
        timings_s={"read_headers": round(read_s, 4), "total": round(time.perf_counter() - start, 4)},
    )
