"""What one `mopt quantize` run is given and hands back, shared by the generation and the embedding
pipelines (pipeline.py, embed_pipeline.py): options, progress callbacks, the gate's refusal, the
report's name, the output checks, rounding a loaded model in place and publishing the folder."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model_optimizer.common.fileio import atomic_write, publish_dir, staging_dir

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


def check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output {output} already exists and is not an empty folder; pick a new path")


def write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def checkpoint_dtype(config: dict) -> torch.dtype:
    """The dtype a checkpoint's weights are stored in (config.json's torch_dtype; float32 when unsaid)."""
    from model_optimizer.runtime.models.loader import DTYPES

    name = str(config.get("torch_dtype") or config.get("dtype") or "float32").replace("torch.", "")
    return DTYPES.get(name, torch.float32)


def round_in_place(model: torch.nn.Module, opts: QuantizeOptions, target: torch.dtype, progress: Progress) -> None:
    """Give every linear the method's weights, rounded from the float ones, and cast the rest to `target`."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization
    from model_optimizer.runtime.layers.quantization.spec import QuantSpec

    layers = attach_quantization(model, QuantSpec(opts.method, group_size=opts.group_size), target, dummy=True)
    progress.start("rounding", len(layers))
    with torch.no_grad():
        for _, layer in layers:
            layer.quant_method.process_weights_after_loading(layer)
            progress.advance("rounding")
        for param in model.parameters():
            param.data = param.data.to(target)


def publish(output: Path, build: Callable[[Path], dict]) -> dict:
    """Build the folder under a temporary name beside `output` (`build(tmp)` writes it and returns its
    report), then, unless the report's gate failed (GateFailed), write the report and rename the folder
    to `output`: a failed or interrupted run leaves nothing behind."""
    tmp = staging_dir(output)
    try:
        report = build(tmp)
        if report["gate"]["failures"]:
            raise GateFailed(report["gate"]["failures"], report)
        write_json(tmp / REPORT_NAME, report)
        publish_dir(tmp, output)  # with the umask's modes: a server running as another user reads it
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
