"""Structured outputs: the grammar mask's host time per step and its effect on TPOT, against `mopt serve`.

    PYTHONPATH=. python3 benchmarks/structured.py [--model DIR | --bpe-from CONFIG_DIR] [--concurrency 1 64]
        [--output-len 256] [--schema order|order-unbounded] [--repeats N] [--output FILE]
        [-- ENGINE FLAGS, e.g. --load-format dummy --dtype bfloat16]

`--bpe-from benchmarks/configs/qwen3-0.6b` serves that config with dummy weights and a byte-level BPE
tokenizer of its full vocabulary (bpe_tokenizer_model.py): structured outputs need tokens that spell
JSON. For each concurrency, `mopt bench` (chat, streamed, closed loop) runs the same prompts twice:
unconstrained (ignore_eos, `--output-len` tokens each), then with `--json-schema SCHEMA` (a nested
order document with bounded strings, arrays, enums and numbers: the grammar ends each request), then
unconstrained again with the structured run's own output lengths (`plain_matched_lengths`): the grammar
ends requests at staggered lengths, so new ones (and their prefills) join every few steps, where the
first plain run's requests all end together in a few waves; only the matched run compares the same
work. `--repeats N` runs the matched plain and the structured run N - 1 times more, alternating, and
records each pair's ratio with their median and spread (`repeats`): one pair's ratio moved by ~0.2x
between runs of the same code on the H200's host. The JSON holds the runs' TPOT / ITL / throughput, the
TPOT ratios to both plain runs (`tpot_ratio`, `tpot_ratio_matched_lengths`; the [structured] target:
<= 1.1 at 64),
and from the server's /metrics the host time the engine core spent advancing grammars and filling
masks per masked step (mean, and the largest one step took), the part of it the step loop waited for
(what the forward and the loop's own work did not hide), and the engine steps. A sample
response is validated with `jsonschema`. Then, in this process, the same schema's masks are filled
for 1 and 64 rows of random walks through it with the served tokenizer (StructuredOutputManager, the
engine core's code), for the per-step distribution (p50 / p90 / p99 / max) the counters cannot give.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, environment, run_mopt_bench, write_json

from model_optimizer.optimizer.tune.server_process import ServerProcess, free_port

REPO = Path(__file__).resolve().parents[1]
SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 24},
                "email": {"type": "string", "maxLength": 32},
                "tier": {"enum": ["free", "pro", "enterprise"]},
            },
            "required": ["name", "email", "tier"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "minItems": 3,
            "maxItems": 6,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "maxLength": 12},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                    "price_cents": {"type": "integer", "minimum": 0, "maximum": 1000000},
                    "note": {"type": "string", "maxLength": 40},
                },
                "required": ["sku", "quantity", "price_cents", "note"],
                "additionalProperties": False,
            },
        },
        "gift": {"type": "boolean"},
        "comment": {"type": "string", "maxLength": 80},
    },
    "required": ["order_id", "customer", "items", "gift", "comment"],
    "additionalProperties": False,
}


def without_max_length(schema: object) -> object:
    """SCHEMA with no string bounded: a random model then never closes a string (it runs to the token
    limit), but every string mask is the cheap one a real model mostly meets (it closes its strings
    long before a bound): what the engine's mask chain costs apart from llguidance's walk under
    `maxLength`."""
    if isinstance(schema, dict):
        return {k: without_max_length(v) for k, v in schema.items() if k != "maxLength"}
    if isinstance(schema, list):
        return [without_max_length(v) for v in schema]
    return schema


SCHEMAS = {"order": SCHEMA, "order-unbounded": without_max_length(SCHEMA)}
METRICS = (
    "mopt:grammar_steps_total",
    "mopt:grammar_host_seconds_total",
    "mopt:grammar_wait_seconds_total",
    "mopt:engine_steps_total",
)


def scrape(url: str) -> dict[str, float]:
    import httpx

    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in (*METRICS, "mopt:grammar_host_seconds_max"):
            values[name] = float(line.rsplit(" ", 1)[1])
    return values


def bench(url: str, args: argparse.Namespace, concurrency: int, out_dir: Path, extra: list[str]) -> dict:
    """One `mopt bench` run through its command entry point; its summary."""
    argv = ["bench", "--base-url", url, "--endpoint", "chat", "--prompt-len", str(args.prompt_len)]
    argv += ["--output-len", str(args.output_len), "--concurrency", str(concurrency), "--no-progress"]
    argv += ["--num-requests", str(concurrency * args.requests_per_slot), *extra]
    run = run_mopt_bench(argv, out_dir)[-1]
    summary = run["summary"]
    keep = ("output_throughput", "num_ok", "num_failed", "output_tokens", "duration_s")
    out = {k: summary.get(k) for k in keep}
    out["lengths"] = sorted(r["output_tokens"] for r in run.get("requests", []) if not r.get("error"))
    for name in ("tpot", "itl", "ttft"):
        stats = summary.get(f"{name}_ms") or {}
        out[f"{name}_ms"] = {k: stats.get(k) for k in ("mean", "p50", "p90", "p99")}
    return out


def length_hist(lengths: list[int]) -> str:
    """`mopt bench`'s hist:LEN=WEIGHT,... of the output lengths a run produced."""
    counts: dict[int, int] = {}
    for n in lengths:
        counts[n] = counts.get(n, 0) + 1
    return "hist:" + ",".join(f"{n}={c}" for n, c in sorted(counts.items()))


def measure(url: str, args: argparse.Namespace, concurrency: int, schema_file: Path, tmp: Path) -> dict:
    plain = bench(url, args, concurrency, tmp / f"plain{concurrency}", [])
    before = scrape(url)
    structured = bench(url, args, concurrency, tmp / f"schema{concurrency}", ["--json-schema", str(schema_file)])
    after = scrape(url)
    lengths = structured.pop("lengths")
    plain.pop("lengths")
    matched, extra = None, []
    if lengths:  # the grammar ends each request at its own length: plain with those lengths, so that both
        # runs have new requests (prefills) joining at the same rate, not plain's four synchronized waves
        extra = ["--output-len", length_hist(lengths)]
        matched = bench(url, args, concurrency, tmp / f"matched{concurrency}", extra)
        matched.pop("lengths")
    missing = [name for name in METRICS if name not in after]
    if missing:  # a silent 0 once hid that the wait counter was never exported
        raise RuntimeError(f"the server's /metrics lacks {missing}")
    delta = {name: after[name] - before.get(name, 0.0) for name in METRICS}
    steps = delta["mopt:grammar_steps_total"]
    result = {"concurrency": concurrency, "plain": plain, "plain_matched_lengths": matched, "structured": structured}
    result["grammar"] = {
        "masked_steps": steps,
        "engine_steps": delta["mopt:engine_steps_total"],
        "host_ms_per_masked_step": round(1000 * delta["mopt:grammar_host_seconds_total"] / steps, 4) if steps else None,
        "waited_ms_per_masked_step": round(1000 * delta["mopt:grammar_wait_seconds_total"] / steps, 4)
        if steps
        else None,
        "host_ms_max_one_step_since_start": round(1000 * after.get("mopt:grammar_host_seconds_max", 0.0), 3),
    }
    p, s = plain["tpot_ms"]["mean"], structured["tpot_ms"]["mean"]
    result["tpot_ratio"] = round(s / p, 3) if p and s else None
    m = matched["tpot_ms"]["mean"] if matched else None
    result["tpot_ratio_matched_lengths"] = round(s / m, 3) if m and s else None
    if matched and args.repeats > 1:
        result["repeats"] = repeat_pairs(url, args, concurrency, schema_file, tmp, extra, (m, s))
    print(
        f"c={concurrency}: TPOT {p} (plain) / {m} (plain, the structured run's lengths) -> {s} ms "
        f"({result['tpot_ratio']}x / {result['tpot_ratio_matched_lengths']}x), {result['grammar']}",
        file=sys.stderr,
    )
    return result


def repeat_pairs(
    url: str,
    args: argparse.Namespace,
    concurrency: int,
    schema_file: Path,
    tmp: Path,
    matched_flags: list[str],
    first: tuple[float, float],
) -> dict:
    """`--repeats` pairs of runs in all, the first being `first` (plain with the structured run's lengths,
    structured; their mean TPOTs): each later pair runs the two back to back again, alternating, so that
    the host's drift over the call lands on both. The ratio of each pair, their median and spread: on the
    H200's host one pair's ratio moved by ~0.2x between runs of the same code."""
    tpots = [first]
    for i in range(1, args.repeats):
        matched = bench(url, args, concurrency, tmp / f"matched{concurrency}-{i}", matched_flags)
        structured = bench(
            url, args, concurrency, tmp / f"schema{concurrency}-{i}", ["--json-schema", str(schema_file)]
        )
        tpots.append((matched["tpot_ms"]["mean"], structured["tpot_ms"]["mean"]))
    ratios = [round(s / m, 3) for m, s in tpots if m and s]
    out = {"tpot_ms_matched_structured": tpots, "ratios": ratios}
    if ratios:
        out |= {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    print(f"c={concurrency}: matched-length ratios over {len(ratios)} pairs {ratios}", file=sys.stderr)
    return out


def sample_is_valid(url: str, model: str, schema: dict, max_tokens: int) -> dict:
    """One non-streamed structured request, its output checked with jsonschema (unless cut at max_tokens)."""
    import httpx

    body = {
        "model": model,
        "messages": [{"role": "user", "content": "An order, please."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}},
        "max_tokens": max_tokens,
    }
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300).json()
    if "choices" not in response:
        return {"valid": f"request failed: {response}"}
    choice = response["choices"][0]
    result = {"finish_reason": choice["finish_reason"], "chars": len(choice["message"]["content"])}
    if choice["finish_reason"] == "length":
        result["valid"] = "not checked: cut at max_tokens"
        return result
    try:
        import jsonschema

        jsonschema.validate(json.loads(choice["message"]["content"]), schema)
        result["valid"] = True
    except ImportError:
        result["valid"] = "jsonschema not installed"
    except Exception as exc:  # noqa: BLE001 - recorded: the figure to look at
        result["valid"] = f"INVALID: {str(exc)[:300]}"
    return result


def offline_masks(model_dir: Path, rows_list: list[int], steps: int, schema: dict) -> dict:
    """Per-step mask time of StructuredOutputManager.fill (+ advance) over random walks through `schema`."""
    import numpy as np

    from model_optimizer.runtime.engine.request import Request
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.sampling_params import SamplingParams
    from model_optimizer.runtime.structured import StructuredOutputs
    from model_optimizer.runtime.structured.compiler import GrammarCompiler
    from model_optimizer.runtime.structured.manager import StructuredOutputManager, default_fill_threads, lanes_for

    tokenizer = load_tokenizer(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    eos = frozenset([config["eos_token_id"]] if isinstance(config.get("eos_token_id"), int) else [])
    started = time.perf_counter()
    threads = default_fill_threads()  # as the engine core sizes them
    compiler = GrammarCompiler(tokenizer, config["vocab_size"], eos, lanes=lanes_for(threads))
    manager = StructuredOutputManager(compiler, threads)
    so = StructuredOutputs.json(schema)
    compiled = manager.submit(so).result()
    compiled.grow()
    out: dict = {"tokenizer_and_compile_s": round(time.perf_counter() - started, 3)}
    rng = np.random.default_rng(0)
    for rows in rows_list:
        times = _walk(manager, compiled, so, rows, steps, rng, Request, SamplingParams)
        out[f"rows_{rows}"] = {f"p{q}_ms": round(float(np.percentile(times, q)) * 1000, 4) for q in (50, 90, 99)}
        out[f"rows_{rows}"].update(max_ms=round(max(times) * 1000, 3), steps=len(times))
    manager.close()
    return out


def _walk(manager, compiled, so, rows, steps, rng, Request, SamplingParams) -> list[float]:  # noqa: ANN001
    import numpy as np

    requests = []
    for i in range(rows):
        requests.append(Request(f"w{rows}-{i}", [1], SamplingParams(structured_outputs=so)))
        manager.start(requests[-1].request_id, compiled)
    times = []
    for _ in range(steps):
        live = [r for r in requests if manager.has(r.request_id)]
        if not live:
            break
        started = time.perf_counter()
        mask = manager.fill(live)
        times.append(time.perf_counter() - started)
        if mask is None:
            break
        for k, request in enumerate(live):
            allowed = np.flatnonzero(np.unpackbits(mask.bitmask[k].view(np.uint8), bitorder="little"))
            request.output_token_ids.append(int(rng.choice(allowed)))
        for request, _ in manager.advance(live):
            manager.drop(request.request_id)  # its document is complete
    for request in requests:
        manager.drop(request.request_id)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder with a byte-level tokenizer")
    parser.add_argument("--bpe-from", default=None, help="config folder served with a generated BPE tokenizer")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--requests-per-slot", type=int, default=4, help="requests per concurrency slot")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--schema", choices=sorted(SCHEMAS), default="order", help="order-unbounded: no maxLength")
    parser.add_argument("--offline-steps", type=int, default=300, help="steps of the in-process mask timing")
    parser.add_argument(
        "--repeats", type=int, default=1, help="pairs of matched-length plain and structured runs (their median ratio)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the server may take to start")
    parser.add_argument("--output", default=str(RESULTS / "structured_cpu.json"))
    parser.add_argument("engine_flags", nargs="*", help="after `--`: engine flags as `mopt serve` takes them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mopt-structured-") as tmp:
        run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> None:
    model_dir = Path(args.model) if args.model else None
    if args.bpe_from:
        from bpe_tokenizer_model import write

        model_dir = tmp / "model"
        write(Path(args.bpe_from), model_dir)
    if model_dir is None:
        from model_optimizer.assets import reference_model_path

        model_dir = reference_model_path()
    schema = SCHEMAS[args.schema]
    schema_file = tmp / "order.json"
    schema_file.write_text(json.dumps(schema))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--model", str(model_dir), *args.engine_flags]
    argv += ["--port", str(port), "--served-model-name", "bench"]
    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    payload = {
        "benchmark": "structured",
        "what": "mopt serve + mopt bench (chat, streamed): unconstrained vs --json-schema, per concurrency; ms",
        "model": str(args.bpe_from or args.model or "(built-in)"),
        "engine_flags": args.engine_flags,
        "workload": {
            "prompt_len": args.prompt_len,
            "output_len": args.output_len,
            "schema_name": args.schema,
            "schema": schema,
        },
        "environment": environment(),
        "runs": [],
    }
    with ServerProcess(argv, tmp / "server.log", env, cwd=REPO) as server:
        payload["server_ready_s"] = round(server.wait_ready(f"{url}/ready", args.timeout), 3)
        # also the warm-up: tokenizer adapter, kernels
        payload["sample"] = sample_is_valid(url, "bench", schema, args.output_len)
        for concurrency in args.concurrency:
            payload["runs"].append(measure(url, args, concurrency, schema_file, tmp))
            write_json(args.output, payload)  # after each: a run cut short keeps what it measured
    payload["offline_masks"] = offline_masks(model_dir, sorted(set([1, *args.concurrency])), args.offline_steps, schema)
    print(f"wrote {write_json(args.output, payload)}", file=sys.stderr)
    print(json.dumps({"sample": payload["sample"], "runs": payload["runs"], "offline": payload["offline_masks"]}))


if __name__ == "__main__":
    main()
