"""What one `mopt quantize` run is given and hands back, shared by the generation and the embedding
pipelines (pipeline.py, embed_pipeline.py): options, progress callbacks, the gate's refusal, the
report's name and the output checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model_optimizer.fileio import atomic_write

REPORT_NAME = "quantization_report.json"


@dataclass
class QuantizeOptions:
    model: Path
    method: str
    output: Path
    calib: str | None = None
    num_calib_samples: int = 128
    calib_seq_len: int = 512
    eval_text: str | None = None
    num_eval_samples: int = 32
    eval_seq_len: int = 512
    group_size: int = 128
    max_ppl_increase: float | None = None
    min_top1: float | None = None
    min_cosine: float | None = None
    """Embedding models: refuse a mean cosine to the original vectors below this (None: the default)."""
    device: str = "auto"
    eval_dtype: str = "auto"


@dataclass
class Progress:
    """Callbacks for a progress display: start(task, total) then advance(task) per unit."""

    start: Callable[[str, int], None] = lambda task, total: None
    advance: Callable[[str], None] = lambda task: None


class GateFailed(Exception):
    def __init__(self, failures: list[str], report: dict) -> None:
        super().__init__("; ".join(failures))
        self.failures, self.report = failures, report


def pick_device(requested: str) -> torch.device:
    from model_optimizer.runner.model_runner import pick_device as runner_pick

    return runner_pick(requested)


def check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output {output} already exists and is not an empty folder; pick a new path")


def write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")
