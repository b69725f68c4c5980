"""Cold and warm start-up times, each start a separate process: `mopt serve` to /ready and `LLM(...)`.

    PYTHONPATH=. python3 benchmarks/cold_start.py [--model DIR] [--runs N] [--cache-dir DIR]
        [--output FILE] [--no-llm] [--no-tokenizer] [--warm-only [--reuse-warm]] [--shipped-cache DIR]
        [-- ENGINE FLAGS, e.g. --load-format dummy --enforce-eager]

What a user waits for is process start to a server that answers, so this script times exactly that
from outside: it starts `python -m model_optimizer.cli.main serve ...` and polls /ready; and, for the
offline API, a fresh `python -c` that builds `LLM(...)` and prints a marker when it returns. Each
process's own start-up phase lines (the model_optimizer.startup logger: imports, config, tokenizer,
weights, kv sizing, kv allocation, warm-up, graph capture, engine, total) are parsed from its stderr.

Compiled kernels are cached on disk by Triton; the script points its cache (and inductor's, should
anything compile) at folders under --cache-dir (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR) so the
runs never touch the user's own caches. "cold": every run gets a new, empty cache folder. "warm": one unmeasured start fills a folder,
then every measured run reuses it. "shipped" (with --shipped-cache DIR, a folder `mopt compile-cache
build` filled, e.g. without a GPU): every run gets a fresh copy of it, as a container image ships it.
Each run also counts the kernels the start compiled itself (new entries in its Triton cache, by
kernel name): for "shipped" these are what the ahead-of-time build missed. The OS page cache (the weights file, site-packages) is not
dropped: that needs root; a first start on a fresh machine is slower than "cold" here.

"tokenizer" times import + load of the model's tokenizer alone in fresh processes, both ways:
the `tokenizers` library (runtime/models/fast_tokenizer.py, what the engine uses) and transformers'
AutoTokenizer (MOPT_TOKENIZER=transformers); skipped for a folder without tokenizer files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import RESULTS, environment, write_json

REPO = Path(__file__).resolve().parents[1]
PHASE = re.compile(r"start-up: ([a-z -]+?) (\d+\.\d+) s")
READY_MARKER = "COLD_START_LLM_READY"
LLM_CHILD = f"""
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
from model_optimizer.cli.main import build_parser
args = build_parser().parse_args(["generate", "--prompt", "x", *sys.argv[1:]])
from dataclasses import asdict
from model_optimizer.cli.args import dataclass_from_args
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.llm import LLM
LLM(**asdict(dataclass_from_args(EngineConfig, args)))
print("{READY_MARKER}", flush=True)
"""


TOKENIZER_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from model_optimizer.runtime.models.tokenizer import load_tokenizer
t1 = time.perf_counter()
tok = load_tokenizer(sys.argv[1])
t2 = time.perf_counter()
tok.encode("warm")
print(json.dumps({"class": type(tok).__name__, "import_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3),
                  "total_s": round(t2 - t0, 3), "imported_transformers": "transformers" in sys.modules}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_env(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "TRITON_CACHE_DIR": str(folder / "triton"),
        # the engine's manager (kernels/compile_cache.py): a shipped copy is read from the copy's own files
        # (Triton's own manager found none of them, or read the original's while it was still there)
        "TRITON_CACHE_MANAGER": "model_optimizer.runtime.kernels.compile_cache:RelocatableCacheManager",
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def cache_entries(folder: Path) -> dict[str, str]:
    """Triton cache entry -> kernel name (each entry folder holds the kernel's <name>.json metadata)."""
    triton_dir = folder / "triton"
    if not triton_dir.is_dir():
        return {}
    entries = {}
    for entry in triton_dir.iterdir():
        names = [p.stem for p in entry.glob("*.json") if not p.name.startswith("__")] if entry.is_dir() else []
        if names:
            entries[entry.name] = names[0]
    return entries


def compiled_during(start, engine_flags: list[str], folder: Path, timeout: float) -> dict:
    """One start with `folder` as its caches, and the kernels it compiled (entries it added)."""
    before = cache_entries(folder)
    result = start(engine_flags, cache_env(folder), timeout)
    added = [name for key, name in cache_entries(folder).items() if key not in before]
    result["compiled"] = {"count": len(added), "kernels": sorted(set(added))}
    return result


def parse_phases(lines: list[str]) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for line in lines if (m := PHASE.search(line))}


def startup_lines(lines: list[str]) -> list[str]:
    """The start's own account of itself (phases, the kernels compiled ahead), kept with its figures."""
    return [line for line in lines if "start-up" in line or "compiled ahead" in line]


def _drain(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))


def start_server(engine_flags: list[str], env: dict[str, str], timeout: float) -> dict:
    """Process start -> first 200 from /ready, and the server's phase lines."""
    port = free_port()
    cmd = [sys.executable, "-m", "model_optimizer.cli.main", "serve", *engine_flags, "--port", str(port)]
    lines: list[str] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mopt serve exited with {proc.returncode}:\n" + "\n".join(lines[-30:]))
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"/ready not reached in {timeout} s:\n" + "\n".join(lines[-30:]))
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1.0).status_code == 200:
                    ready_s = time.perf_counter() - t0
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
    return {"ready_s": round(ready_s, 3), "phases": parse_phases(lines), "startup_lines": startup_lines(lines)}


def start_llm(engine_flags: list[str], env: dict[str, str], timeout: float) -> dict:
    """Process start -> `LLM(...)` returned (a marker on stdout), and its phase lines."""
    cmd = [sys.executable, "-c", LLM_CHILD, *engine_flags]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True)
    reader.start()
    ready_s = None
    try:
        for line in proc.stdout:
            if READY_MARKER in line:
                ready_s = time.perf_counter() - t0
                break
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
    if ready_s is None or proc.returncode != 0:
        raise RuntimeError(f"LLM(...) process failed ({proc.returncode}):\n" + "\n".join(err[-30:]))
    return {"ready_s": round(ready_s, 3), "phases": parse_phases(err), "startup_lines": startup_lines(err)}


def tokenizer_load(model_dir: Path, runs: int, timeout: float) -> dict:
    """Import + load of the tokenizer in fresh processes, through tokenizers and through transformers."""
    result = {}
    for backend in ("auto", "transformers"):
        env = {**os.environ, "MOPT_TOKENIZER": backend, "PYTHONPATH": str(REPO)}
        samples = []
        for _ in range(runs):
            out = subprocess.run(
                [sys.executable, "-c", TOKENIZER_CHILD, str(model_dir.resolve())],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=True,
            )
            samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
        totals = [s["total_s"] for s in samples]
        result["tokenizers" if backend == "auto" else "transformers"] = {
            "class": samples[0]["class"],
            "imported_transformers": samples[0]["imported_transformers"],
            "median_total_s": round(statistics.median(totals), 3),
            "median_import_s": round(statistics.median(s["import_s"] for s in samples), 3),
            "median_load_s": round(statistics.median(s["load_s"] for s in samples), 3),
            "runs": samples,
        }
        print(f"tokenizer via {backend}: median {statistics.median(totals):.3f} s", file=sys.stderr)
    return result


def summarize(runs: list[dict]) -> dict:
    ready = [r["ready_s"] for r in runs]
    phases = {name: round(statistics.median(r["phases"].get(name, 0.0) for r in runs), 3) for name in runs[0]["phases"]}
    outside = [r["ready_s"] - r["phases"].get("total", 0.0) for r in runs]
    return {
        "median_ready_s": round(statistics.median(ready), 3),
        # interpreter start, imports before the engine (server: fastapi, torch, transformers), the server's
        # own set-up and /ready's first answer: what the engine's "total" line does not cover
        "median_outside_engine_s": round(statistics.median(outside), 3),
        "min_ready_s": min(ready),
        "max_ready_s": max(ready),
        "median_phases_s": phases,
    }


def measure(
    kind: str,
    start,
    engine_flags: list[str],
    cache_root: Path,
    runs: int,
    timeout: float,
    warm_only: bool = False,
    shipped: Path | None = None,
    shipped_only: bool = False,
    reuse_warm: bool = False,
) -> dict:
    result: dict = {}
    cold = []
    for i in range(0 if warm_only or shipped_only else runs):
        folder = cache_root / f"{kind}-cold-{i}"
        shutil.rmtree(folder, ignore_errors=True)  # cold: an empty cache folder
        cold.append(compiled_during(start, engine_flags, folder, timeout))
        print(f"{kind} cold {i}: {cold[-1]['ready_s']:.2f} s {cold[-1]['phases']}", file=sys.stderr)
    shipped_runs = []
    for i in range(runs if shipped is not None else 0):
        folder = cache_root / f"{kind}-shipped-{i}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(shipped, folder / "triton")  # what an image built with `mopt compile-cache build` holds
        shipped_runs.append(compiled_during(start, engine_flags, folder, timeout))
        print(f"{kind} shipped {i}: {shipped_runs[-1]['ready_s']:.2f} s, compiled "
              f"{shipped_runs[-1]['compiled']}", file=sys.stderr)  # fmt: skip
    warm: list[dict] = []
    warm_folder = cache_root / f"{kind}-warm"
    # reuse_warm: a folder an earlier run of this script filled (runs that A/B an environment setting)
    if not shipped_only and not (reuse_warm and warm_folder.is_dir()):
        shutil.rmtree(warm_folder, ignore_errors=True)
        start(engine_flags, cache_env(warm_folder), timeout)  # fills the cache; not measured
    for i in range(0 if shipped_only else runs):
        warm.append(start(engine_flags, cache_env(warm_folder), timeout))
        print(f"{kind} warm {i}: {warm[-1]['ready_s']:.2f} s {warm[-1]['phases']}", file=sys.stderr)
    for name, values in (("cold", cold), ("shipped", shipped_runs), ("warm", warm)):
        if values:
            result[name] = {"runs": values, **summarize(values)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the built-in model)")
    parser.add_argument("--runs", type=int, default=3, help="measured starts per kind and cache state")
    parser.add_argument("--cache-dir", default=None, help="folder for the kernel caches (default: a temp folder)")
    parser.add_argument("--output", default=str(RESULTS / "cold_start_cpu.json"))
    parser.add_argument("--no-llm", action="store_true", help="time `mopt serve` only")
    parser.add_argument("--no-serve", action="store_true", help="time `LLM(...)` only")
    parser.add_argument("--warm-only", action="store_true", help="skip the cold starts (one filling start, then warm)")
    parser.add_argument(
        "--reuse-warm", action="store_true", help="keep a warm cache folder an earlier run left in --cache-dir"
    )
    parser.add_argument("--no-tokenizer", action="store_true", help="skip the tokenizer import+load timing")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one start may take")
    parser.add_argument(
        "--shipped-cache", default=None, help="a Triton cache folder built ahead of time: also time starts from a copy"
    )
    parser.add_argument("--shipped-only", action="store_true", help="only the starts from --shipped-cache")
    parser.add_argument("engine_flags", nargs="*", help="after `--`: engine flags as `mopt serve` takes them")
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit(f"--runs must be >= 1, got {args.runs}")
    engine_flags = ([] if args.model is None else ["--model", args.model]) + args.engine_flags
    own_temp = args.cache_dir is None
    shipped = Path(args.shipped_cache).resolve() if args.shipped_cache else None
    cache_root = Path(args.cache_dir or tempfile.mkdtemp(prefix="mopt-cold-start-"))
    try:
        results = {}
        model_dir = _model_dir(args.model)
        if not args.no_tokenizer and (model_dir / "tokenizer.json").is_file():
            results["tokenizer"] = tokenizer_load(model_dir, args.runs, args.timeout)
        if not args.no_serve:
            results["serve"] = measure(
                "serve",
                start_server,
                engine_flags,
                cache_root,
                args.runs,
                args.timeout,
                args.warm_only,
                shipped,
                args.shipped_only,
                args.reuse_warm,
            )
        if not args.no_llm:
            results["llm"] = measure(
                "llm",
                start_llm,
                engine_flags,
                cache_root,
                args.runs,
                args.timeout,
                args.warm_only,
                shipped,
                args.shipped_only,
                args.reuse_warm,
            )
    finally:
        if own_temp:
            shutil.rmtree(cache_root, ignore_errors=True)
    payload = {
        "benchmark": "cold_start",
        "what": "process start -> /ready (serve) or LLM(...) returned (llm); cold = empty Triton/inductor "
        "cache folders, warm = folders filled by one unmeasured start; OS page cache not dropped",
        "model": args.model or "(built-in)",
        "engine_flags": args.engine_flags,
        "runs": args.runs,
        "environment": environment(),
        **results,
    }
    path = write_json(args.output, payload)
    for kind, states in results.items():
        if kind == "tokenizer":
            print("tokenizer " + "  ".join(f"{k}: {v['median_total_s']:.3f} s" for k, v in states.items()))
            continue
        for state, summary in states.items():
            print(f"{kind:5} {state}: median {summary['median_ready_s']:.2f} s  {summary['median_phases_s']}")
    print(f"wrote {path}")


def _model_dir(model: str | None) -> Path:
    """The folder the engine would load (the built-in model's when none is given), without importing torch."""
    if model is not None:
        return REPO / Path(model).expanduser()  # relative to the repository, where the children run
    from model_optimizer.assets import reference_model_path

    return reference_model_path()


if __name__ == "__main__":
    main()
