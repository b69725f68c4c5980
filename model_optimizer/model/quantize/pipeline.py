"""`mopt quantize`: calibrate, round, write compressed-tensors, evaluate with our engine, gate, publish.

The folder is built under a temporary name beside the output and renamed only when the accuracy
gate passes, so an interrupted or refused run leaves nothing at the output path. Embedding models
take the same path with a cosine gate instead of perplexity (embed_pipeline.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from model_optimizer.model.quantize import embed_pipeline
from model_optimizer.model.quantize.calibration import read_documents, token_windows, too_little_text
from model_optimizer.model.quantize.evaluate import Accuracy, compare, gate_failures, load_for_eval
from model_optimizer.model.quantize.job import (
    INT4_REPORTED,
    REPORT_NAME,
    GateFailed,
    Progress,
    QuantizeOptions,
    absolute_output,
    check_int4_groups,
    check_output,
    check_reference,
    checkpoint_dtype,
    exact_load_dtype,
    folder_report,
    publish,
    round_in_place,
    write_json,
)
from model_optimizer.runtime.device import pick_device
from model_optimizer.runtime.models.model_config import is_embedding_folder


def quantize(opts: QuantizeOptions, progress: Progress | None = None) -> dict:
    """Write the quantized folder at opts.output; returns the report. GateFailed when a limit is broken."""
    progress = progress or Progress()
    opts = replace(opts, output=absolute_output(opts.output))  # `--output .` has no name to stage beside
    check_output(opts.output)
    check_not_quantized(opts.model)  # before the lock, the tokenizer and the text
    if is_embedding_folder(opts.model):
        return embed_pipeline.quantize_embedding(opts, progress)
    check_int4_groups(opts.model, opts.method, opts.group_size)
    started = time.time()
    tokenizer = model_tokenizer(opts.model)
    eval_windows = text_windows(tokenizer, opts, "evaluation", progress)
    calib_windows = text_windows(tokenizer, opts, "calibration", progress) if opts.method == "awq" else []

    def build(tmp: Path) -> dict:
        model = quantized_model(opts, calib_windows, progress)
        from model_optimizer.model.quantize.writer import save_compressed_tensors

        save_compressed_tensors(model, opts.method, opts.group_size, opts.model, tmp)
        del model
        accuracy = evaluate(opts.model, tmp, eval_windows, opts, progress)
        return build_report(opts, accuracy, calib_windows, eval_windows, time.time() - started, tmp)

    return publish(opts.output, build, progress.warn)


def check_not_quantized(model: Path) -> None:
    """ValueError for a quantized source, but one whose model dequantizes its format at load (gpt-oss's MXFP4
    experts: its float values are the original the folder is rounded from, and written)."""
    from model_optimizer.runtime.layers.quantization.spec import stored_quantization
    from model_optimizer.runtime.models.model_config import read_config

    if stored_quantization(read_config(model)):
        raise ValueError(f"{model} is already quantized; quantize the original float checkpoint")


def model_tokenizer(model: Path):
    """The model folder's tokenizer; ValueError when it has no tokenizer files. transformers would
    otherwise make up an empty one from config.json's model_type, and the evaluation text would
    tokenize to nothing ("fewer than 2 tokens")."""
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model, required=False)
    if tokenizer is None:
        raise ValueError(
            f"{model} has no tokenizer files (tokenizer.json, tokenizer_config.json, ...): the evaluation "
            "text cannot be tokenized; copy the tokenizer files of the original model into it"
        )
    return tokenizer


def text_windows(tokenizer, opts: QuantizeOptions, split: str, progress: Progress) -> list[list[int]]:
    """The token windows of the "calibration" or "evaluation" text `opts` names; `progress.warn` says so
    when they are too few tokens for the figures made from them to mean anything (too_little_text)."""
    if split == "calibration":
        path, num_samples, seq_len = opts.calib, opts.num_calib_samples, opts.calib_seq_len
    else:
        path, num_samples, seq_len = opts.eval_text, opts.num_eval_samples, opts.eval_seq_len
    windows = token_windows(tokenizer, read_documents(path, split), num_samples, seq_len, split)
    warning = too_little_text(split, windows, num_samples, seq_len)
    if warning is not None:
        progress.warn(warning)
    return windows


def quantized_model(opts: QuantizeOptions, calib_windows: list[list[int]], progress: Progress) -> torch.nn.Module:
    """The original loaded as stored, AWQ-adjusted if asked (its search runs each layer in float32),
    rounded in the checkpoint's dtype."""
    from model_optimizer.runtime.models.loader import load_model
    from model_optimizer.runtime.models.model_config import read_config

    config = read_config(opts.model)
    model = load_model(opts.model, exact_load_dtype(opts.model), pick_device(opts.device))
    target = checkpoint_dtype(opts.model, config)
    if opts.method == "awq":
        progress.start("AWQ search", len(model.model.layers))
        from model_optimizer.model.quantize.awq import apply_awq

        apply_awq(model, calib_windows, opts.group_size, target, on_layer=lambda i: progress.advance("AWQ search"))
    round_in_place(model, opts, target, progress)
    return model


def evaluate(
    reference: Path, folder: Path, windows: list[list[int]], opts: QuantizeOptions, progress: Progress
) -> Accuracy:
    max_len = max(len(w) for w in windows)
    ref_llm = load_for_eval(reference, opts.device, opts.eval_dtype, max_len)
    q_llm = load_for_eval(folder, opts.device, opts.eval_dtype, max_len)
    progress.start("evaluation", len(windows))
    return compare(ref_llm, q_llm, windows, on_window=lambda i: progress.advance("evaluation"))


def eval_only(folder: Path, reference: Path, opts: QuantizeOptions, progress: Progress | None = None) -> dict:
    """Re-evaluate any quantized folder (ours or another tool's) against its original; writes the report."""
    progress = progress or Progress()
    check_reference(folder, reference)  # before anything is measured or the folder's report replaced
    if is_embedding_folder(reference):
        return embed_pipeline.eval_only_embedding(folder, reference, opts, progress)
    started = time.time()
    windows = text_windows(model_tokenizer(reference), opts, "evaluation", progress)
    accuracy = evaluate(reference, folder, windows, opts, progress)
    report = build_report(opts, accuracy, [], windows, time.time() - started, folder)
    from model_optimizer.runtime.models.loader import spec_for_folder

    spec = spec_for_folder(folder, None)
    previous = folder_report(folder, spec) if spec is not None else None
    if previous is not None and previous["method"] == opts.method:
        report["calibration"] = previous.get("calibration")  # how the folder was made, which is not re-measured
    failures = report["gate"]["failures"]
    write_json(folder / REPORT_NAME, report)
    if failures:
        raise GateFailed(failures, report)
    return report


def build_report(
    opts: QuantizeOptions, acc: Accuracy, calib: list[list[int]], evals: list[list[int]], seconds: float, folder: Path
) -> dict:
    config = json.loads((folder / "config.json").read_text())
    qc = config.get("quantization_config") or {}
    failures = gate_failures(acc, opts.max_ppl_increase, opts.min_top1)
    return {
        "model": str(opts.model),
        "method": opts.method,
        "format": qc.get("quant_method"),
        "group_size": opts.group_size if opts.method in INT4_REPORTED else None,
        "calibration": {
            "text": opts.calib or "built-in (Python standard-library docs)",
            "num_samples": len(calib),
            "num_tokens": sum(map(len, calib)),
        }
        if calib
        else None,
        "evaluation": {
            "text": opts.eval_text or "built-in held-out (Python standard-library docs, modules not in calibration)",
            "num_samples": len(evals),
            "num_tokens": sum(map(len, evals)),
        },
        "accuracy": acc.to_dict(),
        "weights_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "seconds": round(seconds, 1),
        "versions": {"torch": torch.__version__},
        "gate": {
            "max_ppl_increase": opts.max_ppl_increase,
            "min_top1": opts.min_top1,
            "passed": not failures,
            "failures": failures,
        },
    }
