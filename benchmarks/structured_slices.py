"""Structured outputs: what llguidance's slicer sets cost per mask, side by side in one walk.

    PYTHONPATH=. python3 benchmarks/structured_slices.py [--model DIR | --bpe-from CONFIG_DIR] [--rows 32]
        [--steps 300] [--extra 10,20,40 ...] [--output FILE]

`--rows` matchers walk the order schema of benchmarks/structured.py (tokens drawn uniformly from each
mask, seeded; a finished document is checked with jsonschema and replaced). At every step each row's
mask is computed once per slicer set, in an order rotated per step, on one thread, and the masks are
asserted equal bit for bit (slices change the cost, never the mask). Sets: llguidance's defaults,
ours (grammar.SLICES), none, and `--extra` ones (the character counts of their string slices, e.g.
`10,20,40`). The JSON holds per set the thread-CPU ms per row mask (mean, p50, p90) and its ratio to
llguidance's defaults, overall and per window of 100 steps, and by mask size (allowed tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import CONFIGS, RESULTS, environment, write_json
from structured import SCHEMA
from structured_mask import load

from model_optimizer.runtime.structured.grammar import JSON_CHARS, SLICES, check, ll_tokenizer
from model_optimizer.runtime.structured.params import StructuredOutputs

SIZES = ((0, 100), (100, 20_000), (20_000, 60_000), (60_000, 1 << 30))
"""Mask sizes (allowed tokens) the time is split by: structure, small-r strings, mid, sliceable."""


def slice_sets(extra: list[str]) -> dict[str, tuple[str, ...] | None]:
    sets: dict[str, tuple[str, ...] | None] = {"llguidance": None, "mopt": SLICES, "none": ()}
    for counts in extra:
        strings = tuple(f"{JSON_CHARS}{{1,{int(k)}}}" for k in counts.split(","))
        sets[counts] = (SLICES[0], *strings, JSON_CHARS + "+")
    return sets


def walk(tokenizer, vocab_size: int, eos: frozenset, sets: dict, args) -> dict:  # noqa: ANN001
    import jsonschema
    import llguidance as llg

    names = list(sets)
    grammar = check(StructuredOutputs.json(SCHEMA))
    templates = {n: llg.LLMatcher(ll_tokenizer(tokenizer, vocab_size, eos, s), grammar) for n, s in sets.items()}
    words = (vocab_size + 31) // 32
    buffers = {n: np.zeros(words, dtype=np.int32) for n in names}
    rng = np.random.default_rng(args.seed)
    rows = [{n: t.deep_copy() for n, t in templates.items()} for _ in range(args.rows)]
    texts: list[list[int]] = [[] for _ in range(args.rows)]
    cpu = {n: np.zeros((args.steps, args.rows)) for n in names}
    size = np.zeros((args.steps, args.rows), dtype=np.int64)
    documents = 0
    for step in range(args.steps):
        order = names[step % len(names) :] + names[: step % len(names)]
        for k, matchers in enumerate(rows):
            for n in order:
                started = time.thread_time_ns()
                matchers[n].unsafe_compute_mask_ptr(buffers[n].ctypes.data, words * 4)
                cpu[n][step, k] = (time.thread_time_ns() - started) / 1e6
            for n in names[1:]:
                if not np.array_equal(buffers[n], buffers[names[0]]):
                    raise AssertionError(f"slices {n}: a mask differs at step {step}, row {k}")
            allowed = np.flatnonzero(np.unpackbits(buffers[names[0]].view(np.uint8), bitorder="little"))
            size[step, k] = len(allowed)
            token = int(rng.choice(allowed))
            texts[k].append(token)
            if not all(m.consume_token(token) for m in matchers.values()):
                raise AssertionError(f"row {k} could not take an allowed token")
            if matchers[names[0]].is_stopped():
                jsonschema.validate(json.loads(tokenizer.decode(texts[k], skip_special_tokens=True)), SCHEMA)
                documents += 1
                rows[k], texts[k] = {n: t.deep_copy() for n, t in templates.items()}, []
    return _summary(cpu, size[args.warmup :], args.warmup) | {"documents_valid": documents}


def _summary(cpu: dict, size: np.ndarray, warmup: int) -> dict:
    base = cpu["llguidance"][warmup:]
    out = {}
    for name, times in cpu.items():
        t = times[warmup:]
        by_size = {}
        for lo, hi in SIZES:
            pick = (size >= lo) & (size < hi)
            by_size[f"{lo}-{hi}"] = {
                "share_of_masks": round(float(pick.mean()), 4),
                "share_of_time": round(float(t[pick].sum() / t.sum()), 4),
                "ms_mean": round(float(t[pick].mean()), 4) if pick.any() else None,
            }
        out[name] = {
            "row_ms": {k: round(float(f(t)), 4) for k, f in (("mean", np.mean), ("p50", np.median))}
            | {"p90": round(float(np.percentile(t, 90)), 4)},
            "ratio_to_llguidance": round(float(t.sum() / base.sum()), 4),
            "ratio_per_100_steps": [
                round(float(t[i : i + 100].sum() / base[i : i + 100].sum()), 4) for i in range(0, len(t), 100)
            ],
            "by_mask_size": by_size,
        }
    return {"sets": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder with a byte-level tokenizer")
    parser.add_argument("--bpe-from", default=str(CONFIGS / "qwen3-0.6b"), help="config folder: generate its BPE")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10, help="first steps left out")
    parser.add_argument("--extra", nargs="*", default=[], help="more sets: string slice lengths, e.g. 10,20,40")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(RESULTS / "structured_slices_cpu.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mopt-structured-slices-") as tmp:
        model_dir = Path(args.model) if args.model else Path(tmp) / "model"
        if not args.model:
            from bpe_tokenizer_model import write

            write(Path(args.bpe_from), model_dir)
        tokenizer, vocab_size, eos = load(model_dir)
        sets = slice_sets(args.extra)
        payload = {
            "benchmark": "structured_slices",
            "what": "thread-CPU ms per row mask per slicer set, one lockstep walk, masks asserted equal",
            "tokenizer": {"source": args.model or args.bpe_from, "size": len(tokenizer), "vocab_size": vocab_size},
            "workload": {"rows": args.rows, "steps": args.steps, "warmup": args.warmup, "seed": args.seed},
            "slice_sets": dict(sets),
            "environment": environment(),
            **walk(tokenizer, vocab_size, eos, sets, args),
        }
        write_json(args.output, payload)
        for name, figures in payload["sets"].items():
            print(f"{name}: {figures['row_ms']} ratio {figures['ratio_to_llguidance']}", file=sys.stderr)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
