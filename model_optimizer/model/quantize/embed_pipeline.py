"""`mopt quantize` for embedding models (BERT-family encoders): round, write, embed, gate, publish.

The same contract as generation models (pipeline.py): the folder is built under a temporary name
and renamed only when the gate passes, so a refused or interrupted run leaves nothing. Only the
gate differs: what an embedding model is for is its vectors, so both the original and the written
folder embed held-out texts through our `Embedder` and the mean cosine per text must reach
`--min-cosine` (default DEFAULT_MIN_COSINE).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch

from model_optimizer.model.quantize.calibration import read_documents
from model_optimizer.model.quantize.embed_accuracy import (
    EmbeddingAccuracy,
    check_embed_method,
    compare_embedders,
    embedding_gate_failures,
    evaluation_texts,
    load_quantized_backbone,
)
from model_optimizer.model.quantize.job import (
    INT4_OF_ANOTHER_TOOL,
    REPORT_NAME,
    GateFailed,
    Progress,
    QuantizeOptions,
    check_int4_groups,
    checkpoint_dtype,
    publish,
    round_in_place,
    write_json,
)
from model_optimizer.runtime.device import pick_device

DEFAULT_MIN_COSINE = 0.99
"""Set from all-MiniLM-L6-v2 on the 256 built-in held-out paragraphs (CPU float32; the per-method
figures are in README "Quantize: mopt quantize", embedding models): 0.99 passes the 8-bit methods
with several times their measured loss to spare and refuses what round-to-nearest int4 does to
this model."""
DEFAULT_NUM_TEXTS = 256


def check_encoder(model: Path, method: str) -> None:
    """Say before any work what cannot be done: decoder embedders, and methods other than EMBED_METHODS."""
    from model_optimizer.runtime.models.model_config import read_config
    from model_optimizer.runtime.models.registry import is_encoder

    config = read_config(model)
    if not is_encoder(config):
        raise ValueError(
            f"{model} is a decoder embedding model ({config['architectures'][0]}): mopt quantize writes "
            "encoder embedding models (BERT family) and decoder LMs, not decoder embedders yet"
        )
    if config.get("quantization_config"):
        raise ValueError(f"{model} is already quantized; quantize the original float checkpoint")
    check_embed_method(method)


def quantize_embedding(opts: QuantizeOptions, progress: Progress) -> dict:
    """Write the quantized encoder at opts.output; returns the report. GateFailed when below --min-cosine."""
    check_encoder(opts.model, opts.method)
    check_int4_groups(opts.model, opts.method, opts.group_size)
    started = time.time()
    texts = read_texts(opts)

    def build(tmp: Path) -> dict:
        write_quantized_encoder(opts, tmp, progress)
        accuracy, measured = evaluate(opts.model, tmp, texts, opts, progress)
        return build_report(opts, accuracy, measured, time.time() - started, tmp)

    return publish(opts.output, build, progress.warn)


def eval_only_embedding(folder: Path, reference: Path, opts: QuantizeOptions, progress: Progress) -> dict:
    """Re-evaluate a quantized encoder folder against its original; writes the report, even when refused."""
    started = time.time()
    texts = read_texts(opts)
    accuracy, measured = evaluate(reference, folder, texts, opts, progress)
    report = build_report(opts, accuracy, measured, time.time() - started, folder)
    write_json(folder / REPORT_NAME, report)
    if report["gate"]["failures"]:
        raise GateFailed(report["gate"]["failures"], report)
    return report


def read_texts(opts: QuantizeOptions) -> list[str]:
    docs = read_documents(opts.eval_text, "evaluation")
    # a .jsonl holds one text per record, as given; .txt files (and the built-in text) are split into paragraphs
    return evaluation_texts(docs, opts.num_eval_samples, split_paragraphs=not str(opts.eval_text).endswith(".jsonl"))


def write_quantized_encoder(opts: QuantizeOptions, out: Path, progress: Progress) -> None:
    """Round the float encoder's linears with the method and save it as compressed-tensors, with the
    sentence-transformers module folders (pooling, normalization) that the embedding recipe needs."""
    from model_optimizer.model.quantize.writer import save_compressed_tensors
    from model_optimizer.runtime.embed.backbone import load_backbone
    from model_optimizer.runtime.models.model_config import read_config

    config = read_config(opts.model)
    encoder = load_backbone(opts.model, config, "float32", pick_device(opts.device), "auto").model
    round_in_place(encoder, opts, checkpoint_dtype(opts.model, config), progress)
    save_compressed_tensors(encoder, opts.method, opts.group_size, opts.model, out)
    for sub in module_folders(opts.model):
        shutil.copytree(opts.model / sub, out / sub)


def module_folders(model: Path) -> list[str]:
    """The sub-folders modules.json names (1_Pooling, 2_Normalize): only those, not onnx/ or other exports."""
    path = model / "modules.json"
    if not path.is_file():
        return []
    modules = json.loads(path.read_text())
    names = {str(m.get("path") or "") for m in modules if isinstance(m, dict)} if isinstance(modules, list) else set()
    return sorted(n for n in names if n and (model / n).is_dir())


def evaluate(
    reference: Path, folder: Path, texts: list[str], opts: QuantizeOptions, progress: Progress
) -> tuple[EmbeddingAccuracy, dict]:
    """The metrics, and how they were measured (texts, tokens, the cut per text, device and dtype)."""
    from model_optimizer.runtime.embed import Embedder

    settings = dict(device=opts.device, dtype=opts.eval_dtype)
    original = Embedder(reference, **settings)
    quantized = Embedder(folder, backbone=load_quantized_backbone(folder, opts.eval_dtype, opts.device), **settings)
    progress.start("evaluation", 2 * len(texts))

    def advance(n: int) -> None:
        for _ in range(n):
            progress.advance("evaluation")

    cut = min(opts.eval_seq_len, original.max_seq_length, quantized.max_seq_length)
    accuracy, num_tokens = compare_embedders(original, quantized, texts, cut, on_progress=advance)
    return accuracy, {
        "num_texts": len(texts),
        "num_tokens": num_tokens,
        "max_tokens_per_text": cut,
        "device": str(original.device),
        "dtype": str(next(original.backbone.parameters()).dtype).replace("torch.", ""),
    }


def build_report(opts: QuantizeOptions, acc: EmbeddingAccuracy, measured: dict, seconds: float, folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    qc = config.get("quantization_config") or {}
    min_cosine = effective_min_cosine(opts)
    failures = embedding_gate_failures(acc, min_cosine)
    return {
        "model": str(opts.model),
        "model_kind": "embedding",
        "method": opts.method,
        "format": qc.get("quant_method"),
        "group_size": opts.group_size if opts.method in ("rtn-int4", INT4_OF_ANOTHER_TOOL) else None,
        "calibration": None,
        "evaluation": {
            "text": opts.eval_text or "built-in held-out (Python standard-library docs, modules not in calibration)",
            **measured,
        },
        "accuracy": acc.to_dict(),
        "weights_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
        "seconds": round(seconds, 1),
        "versions": {"torch": torch.__version__},
        "gate": {"min_cosine": min_cosine, "passed": not failures, "failures": failures},
    }


def effective_min_cosine(opts: QuantizeOptions) -> float:
    return DEFAULT_MIN_COSINE if opts.min_cosine is None else opts.min_cosine
