"""Fill the Triton cache an engine start needs, for a GPU architecture, on a machine without it.

    mopt compile-cache build --model DIR [engine flags] [--arch 9.0 --num-sms 132 --gpu-name "NVIDIA H200"]

The engine's start on a GPU compiles every Triton kernel variant its first forward passes meet: the
profiling prefill at the full token budget, the warm-up prefills of 2 ... 128 tokens, one decode
forward per CUDA-graph bucket, and sampling (runner/model_runner.py, decode_runner.py). This walks the
same passes with the same code, under `kernels.aot.compile_only`: the model is built on the meta
device (shapes and strides, no memory, no arithmetic), every Triton launch compiles for the target
and runs nothing, and the entries land in the folder the engine reads on that GPU
(kernels/compile_cache.py, keyed by versions and architecture). A Docker image built this way
starts without compiling: its first start reads what the build compiled.

What cannot be known without the GPU is covered both ways: the KV cache's size (how many blocks fit
decides whether its strides pass 2**31, which Triton compiles separately) is built for a small and a
large cache. Everything else (block size, batch-size buckets, token budget, quantization, the tile
table of the GPU named) comes from the engine configuration, as at a real start.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch

from model_optimizer.common.processes import environment_set
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.kernels import aot
from model_optimizer.runtime.layers.attention import (
    AttentionMetadata,
    bind_kv_caches,
    decode_num_splits,
    kv_cache_shape,
)
from model_optimizer.runtime.runner.decode_runner import bucket_sizes
from model_optimizer.runtime.runner.input_batch import InputBatch

META = torch.device("meta")
MANIFEST = "aot_manifest.json"
"""Written beside the cache entries: what was built, for whom, with which versions."""


def meta_model(config: EngineConfig, model_dir: str | Path) -> torch.nn.Module:
    """The model as a GPU start builds it (dtype, quantization and the kernels' packing), on the meta device."""
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization, process_quantized_weights
    from model_optimizer.runtime.models.loader import build_model, resolve_dtype, spec_for_folder
    from model_optimizer.runtime.models.model_config import DecoderArgs, read_config
    from model_optimizer.runtime.models.registry import resolve_model_class

    args = DecoderArgs.from_dict(read_config(model_dir), source=str(Path(model_dir) / "config.json"))
    dtype = resolve_dtype(config.dtype, args, torch.device("cuda"))  # what "auto" means on the GPU
    model = build_model(lambda: resolve_model_class(args.architecture)(args), dtype, META)
    attach_quantization(model, spec_for_folder(model_dir, config.quantization), dtype, dummy=True)
    process_quantized_weights(model)  # rounding and repacking on meta: only the resulting layout matters
    return model


def _prefill(model, num_tokens: int, block_size: int, caches: list[torch.Tensor]) -> torch.Tensor:
    """One fresh prompt of `num_tokens` into `caches`, as ModelRunner._profile_forward runs it."""
    meta = AttentionMetadata.for_prefill([num_tokens], block_size, caches, META)
    token_ids = torch.zeros(num_tokens, dtype=torch.int64, device=META)
    return model(token_ids, torch.arange(num_tokens, device=META), meta)


def _sample(model, hidden: torch.Tensor) -> None:
    """Logits and the fused sampling kernel of a batch (layers/sampler.py's plain path)."""
    from model_optimizer.runtime.kernels import triton_kernel

    logits = model.compute_logits(hidden)
    rows = logits.shape[0]
    inv_temperatures = torch.ones(rows, dtype=torch.float32, device=META)
    seeds = torch.zeros(rows, dtype=torch.int64, device=META)
    checked = torch.empty(rows, dtype=torch.int64, device=META)  # as the sampler asks: the checked ids too
    triton_kernel("sampling", "gumbel_sample_checked")(logits, inv_temperatures, seeds, None, checked)


def kv_cache_sizes(config: EngineConfig, elements_per_block: int) -> list[int]:
    """Block counts to build for: the configured one, else a small cache and one whose planes pass
    2**31 elements (the two integer types Triton compiles the attention kernels for)."""
    if config.num_kv_blocks:
        return [config.num_kv_blocks]
    return [1024, (2**31) // elements_per_block + 1]


def walk_start(model, config: EngineConfig, max_model_len: int, kv_dtype: torch.dtype) -> None:
    """The forward passes of an engine start (model_runner.py, decode_runner.py), on meta tensors."""
    args, bs = model.args, config.block_size
    num_kv_heads = model.local_num_kv_heads

    def caches(num_blocks: int) -> list[torch.Tensor]:  # the runner's: full heads, or a latent row per token
        return [torch.empty(kv_cache_shape(model, num_blocks, bs), dtype=kv_dtype, device=META)] * args.num_layers

    with torch.inference_mode():
        budget = min(config.max_num_batched_tokens, max_model_len)
        hidden = _prefill(model, budget, bs, caches(-(-budget // bs)))
        model.compute_logits(hidden[-config.max_num_seqs :])
        for num_blocks in kv_cache_sizes(config, math.prod(kv_cache_shape(model, 1, bs)[2:])):
            layers = caches(num_blocks)
            bind_kv_caches(model, layers)
            length = 2
            while length <= min(128, max_model_len):  # ModelRunner._warm_up_kernels, on the real caches' strides
                _prefill(model, length, bs, [c[:, : -(-length // bs)] for c in layers])
                length *= 2
            batch = InputBatch(config.max_num_seqs, max_model_len, bs, META, config.max_num_batched_tokens)
            for size in bucket_sizes(config.max_num_seqs):  # DecodeRunner: one forward per bucket
                token_ids, positions, meta = batch.decode_views(size)
                meta.num_splits = decode_num_splits(size, num_kv_heads, max_model_len, META)
                _sample(model, model(token_ids, positions, meta))


def check_config(config: EngineConfig) -> None:
    """ValueError for settings no build can compile for: no model, or more than one GPU per engine."""
    if config.model is None:
        raise ValueError("compile-cache build needs --model (the model folder whose engine start to compile)")
    if config.tensor_parallel_size != 1:
        raise ValueError("compile-cache build covers one GPU per engine (tensor_parallel_size 1)")


def build(
    config: EngineConfig,
    target: aot.AotTarget,
    cache_dir: Path,
    claims: Path | None = None,
    manifest: bool = True,
) -> dict:
    """Compile an engine start's kernels for `target` into `cache_dir` (Triton's cache folder); the report.
    `claims`: a parallel build's shared folder (aot_workers.py); `manifest`: write the report beside the
    entries."""
    import triton

    from model_optimizer.runtime.kernels.compile_cache import cache_key

    check_config(config)
    started = time.perf_counter()
    with environment_set("TRITON_CACHE_DIR", str(cache_dir)), aot.compile_only(target, claims) as log:
        model = meta_model(config, config.model)
        max_model_len = config.max_model_len or model.args.max_position_embeddings
        kv_dtype = torch.float8_e4m3fn if config.kv_cache_dtype == "fp8" else next(model.parameters()).dtype
        walk_start(model, config, max_model_len, kv_dtype)
    report = {
        "folder_key": cache_key(f"sm{target.arch}"),
        "target": asdict(target),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "engine": {k: v for k, v in asdict(config).items() if isinstance(v, (str, int, float, bool, type(None)))},
        "kernel_launches": dict(sorted(log.calls.items())),
        "compiled": log.compiled,
        "launchers": log.launchers,
        "entries": count_entries(cache_dir),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if manifest:
        (cache_dir / MANIFEST).write_text(json.dumps(report, indent=1) + "\n")
    return report


def count_entries(cache_dir: Path) -> int:
    return sum(1 for p in cache_dir.iterdir() if p.is_dir()) if cache_dir.exists() else 0
