"""Structured outputs: the host time of one step's grammar masks for a full batch, per way of filling them.

    PYTHONPATH=. python3 benchmarks/structured_mask.py [--model DIR | --bpe-from CONFIG_DIR] [--rows 64]
        [--steps 200] [--threads N ...] [--lanes-per-thread K ...] [--slices mopt|llguidance] [--burst]
        [--only-burst] [--output FILE]

The tokenizer and schema of benchmarks/structured.py: `--bpe-from benchmarks/configs/qwen3-0.6b` (the
default) generates its 151k-token byte-level BPE tokenizer (bpe_tokenizer_model.py, ~30 s), `--model`
takes a folder that has one. `--rows` requests walk the order schema at once, each step's token drawn
uniformly from the row's allowed set (what a dummy model sampling under the mask does); a request
whose document is complete is replaced by a new one, so the batch stays full. Each variant replays
the same walk (the masks are exact, so one seed draws the same tokens: the checksum shows it) through
StructuredOutputManager, the engine core's code, and times every step's `fill` and `advance`:

    rows_one_by_one    the engine's lanes for the largest N, each row filled alone on this thread:
                       the CPU work each row takes, and per step the lane bound (the busiest lane,
                       or the whole work over N threads, whichever is more: what N cannot beat)
    pool_shared_tN     1 lane, a pool of N threads: the engine before lanes (every matcher a copy
                       of one template, so all of them take one lexer lock)
    pool_lanes_tN_xK   K lanes per thread (--lanes-per-thread; the engine's: LANES_PER_THREAD), a
                       pool of N threads: the engine now
    burst_tN           (--burst) as pool_lanes_tN, but every row starts at once on a constraint that has
                       one lane, the others built by the compile pool meanwhile, as a burst of requests
                       meets a server: live matchers move onto each lane once it is built (the engine)
    burst_unspread_tN  (--burst) the same, matchers staying in the lane they started in (the engine
                       before they moved): a burst fills in one lane's turn until its rows end

`--slices llguidance` builds the tokenizer with llguidance's default slicer sets instead of ours
(grammar.SLICES): the masks are the same, only their cost differs (compare runs by fill_cpu_ms_mean).
The JSON holds, per variant, fill and advance ms per step (mean, p50, p90, p99, max; the first
--warmup steps, while lexers build their automata, apart), the CPU ms of the fill (all threads), and
the documents completed, each parsed and checked against the schema (jsonschema when installed).
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

from model_optimizer.runtime.structured.grammar import SLICES
from model_optimizer.runtime.structured.manager import LANES_PER_THREAD, default_fill_threads, lanes_for


def load(model_dir: Path) -> tuple:
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    config = json.loads((model_dir / "config.json").read_text())
    eos = config.get("eos_token_id")
    eos = frozenset(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return load_tokenizer(model_dir), config["vocab_size"], eos


def walk(  # noqa: PLR0913
    tokenizer,  # noqa: ANN001
    vocab_size: int,
    eos: frozenset,
    lanes: int,
    threads: int,
    args,  # noqa: ANN001
    bound_threads: int = 0,
    burst: str = "",
) -> dict:
    """One variant: `args.steps` steps of `args.rows` rows; per-step times and the finished documents.
    `threads` 0: each row filled alone, its CPU time taken, and the lane bound for `bound_threads`.
    `burst` "spread" / "unspread": the lanes grow while the rows run, matchers moving onto them or not."""
    from model_optimizer.runtime.engine.request import Request
    from model_optimizer.runtime.sampling_params import SamplingParams
    from model_optimizer.runtime.structured import StructuredOutputs
    from model_optimizer.runtime.structured.compiler import GrammarCompiler
    from model_optimizer.runtime.structured.manager import StructuredOutputManager

    one_by_one = threads == 0
    slices = SLICES if args.slices == "mopt" else None
    compiler = GrammarCompiler(tokenizer, vocab_size, eos, lanes=lanes, slices=slices)
    manager = StructuredOutputManager(compiler, max(threads, 1))
    so = StructuredOutputs.json(SCHEMA)
    compiled = manager.submit(so).result()
    if not burst:
        compiled.grow()  # all lanes at once: the steady state of a schema many requests use
    elif burst == "unspread":
        manager._spread = lambda: None  # the engine before live matchers moved  # noqa: SLF001
    rng = np.random.default_rng(args.seed)
    made = iter(range(1 << 30))

    def new_request() -> Request:
        request = Request(f"r{next(made)}", [1], SamplingParams(structured_outputs=so))
        manager.start(request.request_id, compiled)
        return request

    batch = [new_request() for _ in range(args.rows)]
    fill, fill_cpu, advance, documents, checksum = [], [], [], [], 0
    rows_cpu, bound = [], []
    for _ in range(args.steps):
        cpu_started, started = time.process_time(), time.perf_counter()
        if one_by_one:
            costs, bits = _rows_one_by_one(manager, batch)
            rows_cpu += [c for _, c in costs]
            bound.append(_lane_bound(costs, bound_threads))
        else:
            mask = manager.fill(batch)
        fill.append(time.perf_counter() - started)
        fill_cpu.append(time.process_time() - cpu_started)
        if not one_by_one:
            bits = np.unpackbits(mask.bitmask.view(np.uint8), axis=1, bitorder="little")[mask.mask_index]
        for k, request in enumerate(batch):
            token = int(rng.choice(np.flatnonzero(bits[k])))
            request.output_token_ids.append(token)
            checksum = (checksum * 1_000_003 + token) % (1 << 61)
        started = time.perf_counter()
        ended = manager.advance(batch)
        advance.append(time.perf_counter() - started)
        for request, error in ended:
            if error is not None:
                raise RuntimeError(f"{request.request_id}: {error}")
            manager.drop(request.request_id)
            documents.append(request.output_token_ids)
            batch[next(k for k, r in enumerate(batch) if r is request)] = new_request()
    manager.close()
    w = args.warmup
    return {
        "lanes": lanes,
        "lanes_built": compiled.lanes,
        "threads": threads,
        "fill_ms": _stats(fill[w:]),
        "fill_ms_warmup": _stats(fill[:w]),
        "fill_ms_per_row_mean": round(1000 * float(np.mean(fill[w:])) / args.rows, 4),
        "advance_ms": _stats(advance[w:]),
        "fill_cpu_ms_mean": round(1000 * float(np.mean(fill_cpu[w:])), 4),
        "documents": _check(tokenizer, documents),
        "checksum": checksum,
        **(_one_by_one_figures(rows_cpu, bound[w:], bound_threads) if one_by_one else {}),
    }


def _rows_one_by_one(manager, batch: list) -> tuple[list[tuple[int, float]], np.ndarray]:  # noqa: ANN001
    """Each row's mask alone (on this thread: llguidance computes a single row where it is called):
    (lane, CPU seconds) per row, and the rows' unpacked masks."""
    costs, rows = [], []
    for request in batch:
        started = time.thread_time()
        mask = manager.fill([request])
        costs.append((manager.lane_of(request.request_id), time.thread_time() - started))
        rows.append(np.unpackbits(mask.bitmask[0].view(np.uint8), bitorder="little"))
    return costs, np.stack(rows)


def _lane_bound(costs: list[tuple[int, float]], threads: int) -> float:
    """The least a pool of `threads` can take for these rows when one lane's rows run one at a time:
    the busiest lane, or the whole work spread evenly, whichever is more."""
    lanes: dict[int, float] = {}
    for lane, seconds in costs:
        lanes[lane] = lanes.get(lane, 0.0) + seconds
    return max(max(lanes.values()), sum(lanes.values()) / threads)


def _one_by_one_figures(rows_cpu: list[float], bound: list[float], threads: int) -> dict:
    return {
        "row_cpu_ms": _stats(rows_cpu),
        f"lane_bound_ms_t{threads}": _stats(bound),
    }


def _stats(seconds: list[float]) -> dict:
    if not seconds:
        return {}
    out = {f"p{q}": round(1000 * float(np.percentile(seconds, q)), 4) for q in (50, 90, 99)}
    return {"mean": round(1000 * float(np.mean(seconds)), 4), **out, "max": round(1000 * max(seconds), 4)}


def _check(tokenizer, documents: list[list[int]]) -> dict:  # noqa: ANN001
    """Completed documents: how many, how many parse as JSON and satisfy SCHEMA."""
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    valid = 0
    for tokens in documents:
        try:
            document = json.loads(tokenizer.decode(tokens, skip_special_tokens=True))
            if jsonschema is not None:
                jsonschema.validate(document, SCHEMA)
            valid += 1
        except Exception:  # noqa: BLE001, S112 - counted: the figure to look at
            continue
    return {"completed": len(documents), "valid": valid, "checked_with": "jsonschema" if jsonschema else "json"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder with a byte-level tokenizer")
    parser.add_argument("--bpe-from", default=str(CONFIGS / "qwen3-0.6b"), help="config folder: generate its BPE")
    parser.add_argument("--rows", type=int, default=64, help="requests filled each step")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="first steps reported apart")
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="pool sizes (default: the engine's)")
    parser.add_argument("--lanes-per-thread", type=int, nargs="+", default=[LANES_PER_THREAD])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slices", choices=("mopt", "llguidance"), default="mopt", help="the slicer's sets")
    parser.add_argument("--burst", action="store_true", help="also the burst variants (lanes built while rows run)")
    parser.add_argument("--only-burst", action="store_true", help="the burst variants alone")
    parser.add_argument("--output", default=str(RESULTS / "structured_mask_cpu.json"))
    args = parser.parse_args()
    pools = args.threads or [default_fill_threads()]
    shapes = {} if args.only_burst else {"rows_one_by_one": (lanes_for(max(pools)), 0, "")}
    for threads in pools:
        if not args.only_burst:
            shapes[f"pool_shared_t{threads}"] = (1, threads, "")
            for per_thread in args.lanes_per_thread:
                shapes[f"pool_lanes_t{threads}_x{per_thread}"] = (lanes_for(threads, per_thread), threads, "")
        if args.burst or args.only_burst:  # alternated, so that a drifting machine favours neither
            for burst in ("unspread", "spread", "spread", "unspread"):
                name = f"burst_{'unspread_' if burst == 'unspread' else ''}t{threads}"
                shapes[name + ("_again" if name in shapes else "")] = (lanes_for(threads), threads, burst)
    with tempfile.TemporaryDirectory(prefix="mopt-structured-mask-") as tmp:
        model_dir = Path(args.model) if args.model else Path(tmp) / "model"
        if not args.model:
            from bpe_tokenizer_model import write

            write(Path(args.bpe_from), model_dir)
        tokenizer, vocab_size, eos = load(model_dir)
        payload = {
            "benchmark": "structured_mask",
            "what": f"host ms per step of StructuredOutputManager.fill / advance, {args.rows} rows walking the schema",
            "tokenizer": {"source": args.model or args.bpe_from, "size": len(tokenizer), "vocab_size": vocab_size},
            "workload": {"rows": args.rows, "steps": args.steps, "warmup": args.warmup, "seed": args.seed},
            "slices": args.slices,
            "environment": environment(),
            "variants": {},
        }
        for name, (lanes, threads, burst) in shapes.items():
            payload["variants"][name] = walk(tokenizer, vocab_size, eos, lanes, threads, args, max(pools), burst)
            summary = {
                k: payload["variants"][name][k] for k in ("fill_ms", "fill_cpu_ms_mean", "advance_ms", "documents")
            }
            print(f"{name}: {summary}", file=sys.stderr)
            write_json(args.output, payload)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
