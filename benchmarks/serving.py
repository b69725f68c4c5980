"""Serving throughput and latency: `mopt serve` in a subprocess, loaded by `mopt bench`.

    PYTHONPATH=. python3 benchmarks/serving.py [--model DIR] [--num-requests 1000] [--prompt-len 512]
        [--output-len 128] [--loads inf 64 1] [--one-client-requests 30] [--offline]
        [--sweep-num-rates 0] [--logprobs 5] [--with-and-without-logprobs] [--bench-flags "..."]
        [--output FILE] [-- SERVE FLAGS, e.g. --load-format dummy --api-server-count 2]

The server is started exactly as a user starts it (`python -m model_optimizer.cli.main serve`, the
flags passed through) and `mopt bench` runs through its own command entry point, so the figures are
what the two commands give. `--loads` lists the runs: `inf` (every request sent at once: the
throughput ceiling) and closed loops at a number of clients (64: the serving TPOT against the engine's
decode step at that batch; 1: one user's TTFT and TPOT, with --one-client-requests requests). With
--offline, the offline engine (`LLM.generate`, in a subprocess of its own, before the server starts)
first runs the same number of requests of the same lengths: the ceiling the server is held against.
Then, with --sweep-num-rates N > 0, `mopt bench`'s rate sweep. With --logprobs K every request also
asks for K top logprobs; --with-and-without-logprobs measures both and reports the throughput ratio.

The JSON holds, per run: output tok/s, request rate, and TTFT / TPOT / ITL percentiles, plus the
server's start-up time and the machine. A model served without a tokenizer (dummy weights) streams
token ids (`return_token_ids`), so TTFT and ITL are measured there too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

from common import RESULTS, environment, run_mopt_bench, write_json

from model_optimizer.optimizer.tune.server_process import ServerProcess, free_port

REPO = Path(__file__).resolve().parents[1]
KEPT = ("output_throughput", "total_throughput", "request_rate", "num_ok", "num_failed", "duration_s", "output_tokens")
LATENCIES = ("ttft", "tpot", "itl")


_RUNS = itertools.count()


def bench(url: str, args: argparse.Namespace, out_dir: Path, extra: list[str]) -> list[dict]:
    """`mopt bench` through its command entry point; the run JSON files it wrote, in order. Each call
    draws its prompts with a seed of its own (the first one's is --seed, as the offline engine's): the
    server's prefix cache must not serve a later run the prompts an earlier one computed."""
    argv = ["bench", "--base-url", url, "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len)]
    argv += ["--num-requests", str(args.num_requests), "--no-progress"]
    argv += ["--seed", str(args.seed + next(_RUNS)), *extra]
    return run_mopt_bench(argv, out_dir)


def digest(run: dict) -> dict:
    """What the [perf] issue asks for from one run: throughput and latency percentiles (ms)."""
    summary = run["summary"]
    out = {key: summary.get(key) for key in KEPT if key in summary}
    out["load"] = run.get("load", {}).get("description") or run.get("label")
    for name in LATENCIES:
        stats = summary.get(f"{name}_ms")
        if isinstance(stats, dict):
            out[f"{name}_ms"] = {k: stats[k] for k in ("mean", "p50", "p90", "p99") if k in stats}
    return out


def measure(url: str, args: argparse.Namespace, out_dir: Path, logprobs: int | None) -> dict:
    extra = ([] if logprobs is None else ["--logprobs", str(logprobs)]) + args.bench_flags.split()
    result: dict = {"logprobs": logprobs}
    for load in args.loads:
        if load == "inf":
            key, flags = "rate_inf", ["--request-rate", "inf"]
        else:
            key, flags = f"clients_{load}", ["--concurrency", load]
            if load == "1":
                flags += ["--num-requests", str(args.one_client_requests)]
        result[key] = [digest(r) for r in bench(url, args, out_dir, [*flags, *extra])]
        run = result[key][0]
        print(
            f"{key}, logprobs={logprobs}: {run.get('output_throughput')} tok/s, "
            f"TTFT p50 {run.get('ttft_ms', {}).get('p50')} ms, TPOT p50 {run.get('tpot_ms', {}).get('p50')} ms",
            file=sys.stderr,
        )
    if args.sweep_num_rates > 0:
        sweep = ["--load-mode", "sweep", "--sweep-num-rates", str(args.sweep_num_rates), *extra]
        result["sweep"] = [digest(r) for r in bench(url, args, out_dir, sweep)]
    return result


OFFLINE = """
import json, random, sys, time
from model_optimizer import LLM, SamplingParams
args = json.loads(sys.argv[1])
llm = LLM(**args["engine"])
rng = random.Random(args["seed"])
vocab = llm.engine.info.vocab_size
prompts = [[rng.randrange(100, vocab - 100) for _ in range(args["prompt_len"])] for _ in range(args["num_requests"])]
params = SamplingParams(max_tokens=args["output_len"], ignore_eos=True, temperature=1.0, detokenize=False)
llm.generate(prompts[:8], params)  # warm-up: first-shape compiles stay out of the figure
t0 = time.perf_counter()
outputs = llm.generate(prompts, params)
seconds = time.perf_counter() - t0
tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
print(json.dumps({"output_throughput": round(tokens / seconds, 1), "seconds": round(seconds, 3), "output_tokens": tokens}))
"""


def offline(args: argparse.Namespace) -> dict:
    """The offline engine on requests of the same number and lengths (random token ids), in a subprocess."""
    import subprocess

    engine = _engine_args(args.engine_flags)
    if args.model is not None:
        engine["model"] = args.model
    spec = {
        "engine": engine,
        "seed": args.seed,
        "prompt_len": args.prompt_len,
        "output_len": args.output_len,
        "num_requests": args.num_requests,
    }
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run(
        [sys.executable, "-c", OFFLINE, json.dumps(spec)], capture_output=True, text=True, env=env, cwd=REPO
    )
    if run.returncode != 0:
        return {"error": run.stderr[-2000:]}
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "engine": engine}


def _engine_args(flags: list[str]) -> dict:
    """The EngineConfig fields among `mopt serve` flags (server-only flags are left out)."""
    from model_optimizer.runtime.config import EngineConfig

    fields = EngineConfig.__dataclass_fields__
    out, i = {}, 0
    while i < len(flags):
        name = flags[i].removeprefix("--").replace("-", "_")
        if name.startswith("no_") and name[3:] in fields:
            out[name[3:]], i = False, i + 1
        elif name in fields and fields[name].type in ("bool", bool):
            out[name], i = True, i + 1
        elif name in fields:
            out[name], i = _value(flags[i + 1]), i + 2
        else:
            i += 2 if i + 1 < len(flags) and not flags[i + 1].startswith("--") else 1
    return out


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the built-in model)")
    parser.add_argument("--num-requests", type=int, default=1000)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--sweep-num-rates", type=int, default=0, help="rates of the sweep after rate inf (0: none)")
    parser.add_argument("--logprobs", type=int, default=None, help="top logprobs asked on every request")
    parser.add_argument(
        "--with-and-without-logprobs", action="store_true", help="measure without, then with --logprobs (default 5)"
    )
    parser.add_argument("--loads", nargs="+", default=["inf"], help="inf and/or numbers of closed-loop clients")
    parser.add_argument("--one-client-requests", type=int, default=30, help="requests of the 1-client run")
    parser.add_argument("--offline", action="store_true", help="first the offline engine on the same requests")
    parser.add_argument("--bench-flags", default="", help="more `mopt bench` flags, e.g. '--num-workers 4'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the server may take to start")
    parser.add_argument("--output", default=str(RESULTS / "serving_cpu.json"))
    parser.add_argument("engine_flags", nargs="*", help="after `--`: engine flags as `mopt serve` takes them")
    args = parser.parse_args()
    for name in ("num_requests", "prompt_len", "output_len"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    settings = [None, args.logprobs or 5] if args.with_and_without_logprobs else [args.logprobs]
    engine_flags = ([] if args.model is None else ["--model", args.model]) + args.engine_flags
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "model_optimizer.cli.main", "serve", *engine_flags, "--port", str(port)]
    env = {"PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    payload = {
        "benchmark": "serving",
        "what": "mopt serve (subprocess) + mopt bench: rate inf then an optional rate sweep; latencies in ms",
        "model": args.model or "(built-in)",
        "engine_flags": args.engine_flags,
        "workload": {"num_requests": args.num_requests, "prompt_len": args.prompt_len, "output_len": args.output_len},
        "environment": environment(),
        "runs": [],
    }
    runs = payload["runs"]
    if args.offline:
        payload["offline"] = offline(args)
        print(f"offline: {payload['offline'].get('output_throughput')} tok/s", file=sys.stderr)
        write_json(args.output, payload)
    with (
        tempfile.TemporaryDirectory(prefix="mopt-serving-") as tmp,
        ServerProcess(argv, Path(tmp) / "server.log", env, cwd=REPO) as server,  # stopped, its group reaped
    ):
        payload["server_ready_s"] = round(server.wait_ready(f"{url}/ready", args.timeout), 3)
        for k in settings:
            runs.append(measure(url, args, Path(tmp) / f"lp{k}", k))
            path = write_json(args.output, payload)  # after each setting: a run cut short keeps what it measured
    if len(runs) == 2 and "rate_inf" in runs[0]:
        without, with_lp = (r["rate_inf"][0].get("output_throughput") for r in runs)
        payload["logprobs_throughput_ratio"] = round(with_lp / without, 3) if without and with_lp else None
    if args.offline and runs and "rate_inf" in runs[0]:
        served, ceiling = runs[0]["rate_inf"][0].get("output_throughput"), payload["offline"].get("output_throughput")
        payload["served_vs_offline"] = round(served / ceiling, 3) if served and ceiling else None
    path = write_json(args.output, payload)
    for run in runs:
        print(f"logprobs={run['logprobs']}: {json.dumps(run['rate_inf'][0])}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
