"""Host cost of serving: CPU time per engine step and per streamed chunk, server and client apart.

    .venv/bin/python benchmarks/serving_overhead.py [--concurrency 16 64] [--repeats 3] [--profile]

Three processes: this one (the driver), the server (the real app under uvicorn on 127.0.0.1, an
OS-chosen port, a tiny random Qwen3 checkpoint) and the client (`mopt bench`'s BenchClient, closed
loop at N concurrent streaming completions with return_token_ids, every request ignore_eos so each
streams `--output-len` chunks). By default no model runs: each engine step's "device" work is a
`--device-ms` wait with the GIL released, after the step before it, as a GPU's (fake_device), so
the engine thread's CPU is host work only and the event loop competes with it for the GIL as on a
GPU machine. CPU time, not wall time, is what is compared: on a shared, loaded machine it moves
far less between runs. The server's CPU is split by thread: the event loop (HTTP, routes, SSE
chunks, metrics), the engine loop thread (scheduler, runner inputs, output processing) and the
whole process.

`--profile` adds one more run per concurrency with cProfile (thread CPU time) on the event-loop
thread, the engine thread's steps and the client, with shares per package; `--py-spy` one sampled
by py-spy (which thread holds the GIL, doing what). On a GPU machine, `--model DIR --device-ms 0
--engine-args '{"load_format": "dummy"}'` measures the real model's serving path the same way.

Writes benchmarks/results/serving_overhead_{cpu,gpu}[_LABEL].json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

from common import RESULTS, environment, write_json  # noqa: E402

PROMPT_LEN = 32


# ----------------------------------------------------------------- server process
def serve(
    model_dir: str, max_num_seqs: int, profile: bool, tokenizer: bool, device_ms: float, http: str, engine_args: str
) -> None:
    """Run the app on an OS-chosen port; answer 'start'/'stop' lines on stdin with CPU snapshots on stdout."""
    import cProfile
    import io
    import pstats
    import socket
    import threading

    import uvicorn

    from model_optimizer import LLM
    from model_optimizer.runtime.engine.async_engine import AsyncEngine
    from model_optimizer.runtime.server.app import create_app
    from model_optimizer.runtime.server.config import ServerConfig

    kwargs = {"max_model_len": PROMPT_LEN + 1024, "max_num_seqs": max_num_seqs}
    kwargs.update(json.loads(engine_args) if engine_args else {"num_kv_blocks": 4096})
    llm = LLM(model_dir, **kwargs)
    if not tokenizer:
        llm.tokenizer = None
        llm.engine.output_processor.tokenizer = None
    if device_ms > 0:
        fake_device(llm.runner, device_ms / 1e3)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(ServerConfig(served_model_name="tiny", log_level="warning"), llm=llm)
    if http == "serve":  # what mopt serve runs: httptools with its head bound, else h11
        from model_optimizer.runtime.server.http_layer import uvicorn_http_options

        options = uvicorn_http_options(16 << 10)
    else:
        options = {"http": http}
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, **options))
    loop_profile = cProfile.Profile(time.thread_time)  # CPU time: no GIL waits counted as work
    engine_profile = cProfile.Profile(time.thread_time)
    profiling = {"want": False}
    original_step = AsyncEngine._step

    def profiled_step(self: AsyncEngine) -> None:  # the engine thread's own profile, one step at a time
        if not profiling["want"]:
            original_step(self)
            return
        engine_profile.enable()
        try:
            original_step(self)
        finally:
            engine_profile.disable()

    if profile:
        AsyncEngine._step = profiled_step  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    state = app.state.server
    loop_tid = thread.native_id
    loop_clock = time.pthread_getcpuclockid(thread.ident)
    engine_thread = state.engine._thread
    engine_clock = time.pthread_getcpuclockid(engine_thread.ident)
    print(json.dumps({"port": sock.getsockname()[1], "loop_tid": loop_tid}), flush=True)

    def snapshot() -> dict:
        return {
            "loop_cpu_s": time.clock_gettime(loop_clock),
            "engine_cpu_s": time.clock_gettime(engine_clock),
            "process_cpu_s": time.process_time(),
            "steps": state.engine.engine.num_steps,
            "wall_s": time.perf_counter(),
        }

    def call_on_loop(fn) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        state.engine._loop.call_soon_threadsafe(run)
        done.wait()

    for line in sys.stdin:
        command = line.strip()
        if command == "start":
            if profile:
                profiling["want"] = True
                call_on_loop(loop_profile.enable)
            print(json.dumps(snapshot()), flush=True)
        elif command == "stop":
            snap = snapshot()
            if profile:
                call_on_loop(loop_profile.disable)
                profiling["want"] = False
                snap["profile"] = {"loop": _top(loop_profile, pstats, io), "engine": _top(engine_profile, pstats, io)}
            print(json.dumps(snap), flush=True)
            break
    server.should_exit = True
    thread.join(10)


def fake_device(runner, seconds: float) -> None:
    """A GPU's shape of work on a CPU: `launch` builds the step's inputs (the real host code) but runs no
    model, and `collect` waits, with the GIL released as a device sync does, until the step is done: `seconds`
    after its launch or after the step before it is done, whichever is later (a device runs one step at a
    time). So the engine thread's CPU is host work only, and the event loop competes with it for the GIL
    as it does on a GPU machine. Every sampled token is 5."""
    import torch

    from model_optimizer.runtime.layers.sampler import SampledTokens
    from model_optimizer.runtime.runner.step_handle import StepHandle

    done_at: dict[int, float] = {}
    busy_until = [0.0]
    collect = runner.collect

    def launch(out, pending=None):
        runner.batch.update(out)
        inputs = runner.batch.prepare(out, pending.pending_for_next() if pending is not None else {})
        batch = [s.sampling_input(p) for s, p in zip(inputs.sample_states, inputs.sample_positions)]
        sampled = SampledTokens(torch.full((len(batch),), 5), torch.ones(len(batch), dtype=torch.bool))
        handle = StepHandle(inputs.sample_states, batch, sampled)
        busy_until[0] = done_at[id(handle)] = max(time.perf_counter(), busy_until[0]) + seconds
        return handle

    def wait_and_collect(handle):
        left = done_at.pop(id(handle), 0.0) - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return collect(handle)

    runner.launch, runner.collect = launch, wait_and_collect


def _top(profile, pstats, io, n: int = 25) -> list[dict]:
    """The profile's functions with the most own time."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({name})",
                "calls": calls,
                "own_s": round(own, 4),
                "cumulative_s": round(cumulative, 4),
            }
        )
    rows.sort(key=lambda r: -r["own_s"])
    total = sum(r["own_s"] for r in rows)
    by_package: dict[str, float] = {}
    for (file, _, name), (_, _, own, _, _) in stats.stats.items():
        package = _package(file, name)
        by_package[package] = by_package.get(package, 0.0) + own
    whole = sum(by_package.values()) or 1.0
    shares = {k: round(v / whole, 3) for k, v in sorted(by_package.items(), key=lambda kv: -kv[1]) if v / whole >= 0.01}
    return [{"total_own_s": round(total, 4), "share_by_package": shares}] + rows[:n]


def _package(file: str, name: str) -> str:
    """Where a profiled function lives: model_optimizer's module, a library's top package, or a builtin."""
    if file == "~":
        return "builtin " + (name.split("'")[1] if "'" in name else name.split(" ")[-1].rstrip(">"))
    parts = Path(file).parts
    if "model_optimizer" in parts:
        return "/".join(parts[parts.index("model_optimizer") :])
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    return Path(file).parent.name + "/" + Path(file).name


# ----------------------------------------------------------------- client process
def client(url: str, concurrency: int, num_requests: int, output_len: int, logprobs: int | None, profile: bool) -> None:
    """Closed loop of streaming completions through mopt bench's client; prints its CPU time and counts."""
    import cProfile
    import io
    import pstats

    from model_optimizer.optimizer.bench.client import BenchClient, ClientConfig
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    cfg = ClientConfig(base_url=url, model="tiny", return_token_ids=True, logprobs=logprobs)
    prompt = list(range(10, 10 + PROMPT_LEN))
    req = BenchRequest(prompt=prompt, prompt_len=PROMPT_LEN, output_len=output_len)

    async def run() -> dict:
        t0 = time.perf_counter()
        async with BenchClient(cfg, concurrency, t0) as bench:
            body = bench.body(req)
            await bench.send(0, req, body, t0, 0)  # connections and first-request costs outside the timing
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            profiler = cProfile.Profile(time.thread_time) if profile else None
            if profiler is not None:
                profiler.enable()
            start_cpu, start = time.process_time(), time.perf_counter()
            counter = iter(range(num_requests))
            records = []

            async def slot(k: int) -> None:
                for i in counter:
                    records.append(await bench.send(i, req, body, time.perf_counter(), k))

            await asyncio.gather(*(slot(k) for k in range(concurrency)))
            cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
            if profiler is not None:
                profiler.disable()
        errors = [r.error_detail or r.error for r in records if not r.ok]
        return {
            "client_cpu_s": cpu,
            "client_wall_s": wall,
            "chunks": sum(len(r.chunk_times) for r in records),
            "output_tokens": sum(r.output_tokens for r in records),
            "errors": errors[:3],
            "num_errors": len(errors),
            **({"profile": _top(profiler, pstats, io)} if profiler is not None else {}),
        }

    print(json.dumps(asyncio.run(run())), flush=True)


# ----------------------------------------------------------------- driver
def model_folder(tokenizer: bool) -> Path:
    """A tiny random Qwen3 checkpoint (built once, kept in the temp folder)."""
    folder = Path(tempfile.gettempdir()) / "mopt_serving_overhead_qwen3"
    if not (folder / "model.safetensors").is_file():
        from tests.tiny_checkpoints import build_checkpoint, tiny_config

        config = tiny_config("qwen3", head_dim=32, max_position_embeddings=2048, tie_word_embeddings=True)
        build_checkpoint(folder, config)
    return folder


def _spawn(args: list[str]) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )


def py_spy_binary() -> str:
    """py-spy beside this interpreter (a venv) or on PATH (a --target install puts it in its bin/)."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else (shutil.which("py-spy") or str(beside))


def py_spy_summary(collapsed: Path, n: int = 25) -> dict:
    """Per thread: its samples and the functions seen most at the top of its stack (own samples), from
    py-spy's collapsed stacks (`--threads --gil`: only samples of the thread that held the GIL)."""
    threads: dict[str, dict] = {}
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        thread = threads.setdefault(frames[0], {"samples": 0, "own": {}})
        thread["samples"] += int(count)
        leaf = frames[-1]
        thread["own"][leaf] = thread["own"].get(leaf, 0) + int(count)
    out = {}
    for name, t in sorted(threads.items(), key=lambda kv: -kv[1]["samples"]):
        top = sorted(t["own"].items(), key=lambda kv: -kv[1])[:n]
        out[name] = {"samples": t["samples"], "top_own": [{"frame": f, "samples": c} for f, c in top]}
    return out


def one_run(
    model_dir: Path, args: argparse.Namespace, concurrency: int, profile: bool, py_spy: Path | None = None
) -> dict:
    server = _spawn(
        ["--serve", str(model_dir), "--max-num-seqs", str(max(concurrency, 16))]
        + (["--profile"] if profile else [])
        + ([] if args.tokenizer else ["--no-tokenizer"])
        + ["--device-ms", str(args.device_ms), "--http", args.http, "--engine-args", args.engine_args]
    )
    hello = json.loads(server.stdout.readline())
    url = f"http://127.0.0.1:{hello['port']}"
    num_requests = concurrency * args.rounds
    client_args = ["--client", url, "--concurrency", str(concurrency), "--num-requests", str(num_requests)]
    client_args += ["--output-len", str(args.output_len)] + (["--profile"] if profile else [])
    if args.logprobs is not None:
        client_args += ["--logprobs", str(args.logprobs)]
    bench = _spawn(client_args)
    try:
        if bench.stdout.readline().strip() != "ready":
            raise RuntimeError("client did not start")
        spy = None
        if py_spy is not None:
            spy = subprocess.Popen(
                [py_spy_binary(), "record", "-p", str(server.pid), "-r", "500"]
                + ["--threads", "--gil", "--nonblocking", "-f", "raw", "-o", str(py_spy)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # py-spy attaches
        server.stdin.write("start\n")
        server.stdin.flush()
        before = json.loads(server.stdout.readline())
        bench.stdin.write("go\n")
        bench.stdin.flush()
        seen = json.loads(bench.stdout.readline())
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        server.stdin.write("stop\n")
        server.stdin.flush()
        after = json.loads(server.stdout.readline())
    finally:
        for proc in (bench, server):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    steps = after["steps"] - before["steps"]
    chunks = seen["chunks"]
    loop = after["loop_cpu_s"] - before["loop_cpu_s"]
    engine = after["engine_cpu_s"] - before["engine_cpu_s"]
    process = after["process_cpu_s"] - before["process_cpu_s"]
    wall = after["wall_s"] - before["wall_s"]
    result = {
        "concurrency": concurrency,
        "requests": num_requests,
        "output_tokens": seen["output_tokens"],
        "chunks": chunks,
        "engine_steps": steps,
        "errors": seen["num_errors"],
        "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 1),
        "wall_ms_per_step": round(1e3 * wall / steps, 3),
        "output_tok_per_s": round(seen["output_tokens"] / wall, 1),
        "server_loop_cpu_ms_per_step": round(1e3 * loop / steps, 3),
        "server_loop_cpu_us_per_chunk": round(1e6 * loop / chunks, 1),
        "engine_thread_cpu_ms_per_step": round(1e3 * engine / steps, 3),
        "server_process_cpu_ms_per_step": round(1e3 * process / steps, 3),
        "server_process_cpu_us_per_chunk": round(1e6 * process / chunks, 1),
        "client_cpu_us_per_chunk": round(1e6 * seen["client_cpu_s"] / chunks, 1),
        "client_cpu_ms_per_step": round(1e3 * seen["client_cpu_s"] / steps, 3),
    }
    if seen["errors"]:
        result["error_samples"] = seen["errors"]
    if profile:
        result["profile"] = {**after["profile"], "client": seen["profile"]}
    if py_spy is not None and py_spy.is_file():
        result["py_spy"] = py_spy_summary(py_spy)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client slot")
    parser.add_argument("--repeats", type=int, default=3, help="runs per concurrency; the median is reported")
    parser.add_argument("--logprobs", type=int, default=None)
    parser.add_argument(
        "--device-ms",
        type=float,
        default=2.6,
        help="no model: each step waits this long off the GIL, as for a GPU (H200 decode at batch 64: 2.6); "
        "0: run the tiny model's forward on the CPU",
    )
    parser.add_argument("--no-tokenizer", dest="tokenizer", action="store_false", help="serve token ids only")
    parser.add_argument("--profile", action="store_true", help="one more run per concurrency under cProfile")
    parser.add_argument(
        "--model", help="serve this model folder instead of the tiny Qwen3 (e.g. on a GPU with --device-ms 0)"
    )
    parser.add_argument(
        "--engine-args",
        default="",
        help='JSON of LLM keyword arguments, e.g. \'{"load_format": "dummy"}\' (default: a 4096-block KV cache)',
    )
    parser.add_argument(
        "--http",
        default="serve",
        choices=["serve", "h11", "httptools"],
        help="uvicorn's HTTP implementation; serve: mopt serve's (httptools with a head bound, h11 without httptools)",
    )
    parser.add_argument(
        "--py-spy", action="store_true", help="one more run per concurrency sampled by py-spy (GIL holders)"
    )
    parser.add_argument("--label", default="", help="suffix of the output file name")
    parser.add_argument("--serve"), parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--client"), parser.add_argument("--num-requests", type=int, default=0)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.max_num_seqs, args.profile, args.tokenizer, args.device_ms, args.http, args.engine_args)
        return
    if args.client:
        client(args.client, args.concurrency[0], args.num_requests, args.output_len, args.logprobs, args.profile)
        return
    model_dir = Path(args.model) if args.model else model_folder(args.tokenizer)
    runs = {}
    for concurrency in args.concurrency:
        repeats = [one_run(model_dir, args, concurrency, profile=False) for _ in range(args.repeats)]
        median = {}
        for key in repeats[0]:
            values = sorted(r[key] for r in repeats)
            median[key] = values[len(values) // 2] if isinstance(values[0], (int, float)) else values[0]
        entry = {"median": median, "runs": repeats}
        if args.profile:
            entry["profiled_run"] = one_run(model_dir, args, concurrency, profile=True)
        if args.py_spy:
            stacks = RESULTS / f"serving_overhead_cpu{'_' + args.label if args.label else ''}_n{concurrency}.pyspy.txt"
            entry["py_spy_run"] = one_run(model_dir, args, concurrency, profile=False, py_spy=stacks)
        runs[str(concurrency)] = entry
        keys = ("steps_per_s", "wall_ms_per_step", "server_loop_cpu_ms_per_step", "server_loop_cpu_us_per_chunk")
        keys += ("engine_thread_cpu_ms_per_step", "client_cpu_us_per_chunk", "errors")
        print(f"N={concurrency}: " + ", ".join(f"{k}={median[k]}" for k in keys), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    out = {
        "environment": environment(),
        "commit": commit.stdout.strip(),
        "workload": {
            "prompt_len": PROMPT_LEN,
            "output_len": args.output_len,
            "rounds": args.rounds,
            "logprobs": args.logprobs,
            "device_ms": args.device_ms,
            "http": args.http,
            "tokenizer": args.tokenizer,
            "return_token_ids": True,
            "model": args.model or "tiny random Qwen3 (tests/tiny_checkpoints.py)",
            "engine_args": args.engine_args,
        },
        "results": runs,
    }
    kind = "gpu" if out["environment"].get("gpu") else "cpu"
    name = f"serving_overhead_{kind}" + (f"_{args.label}" if args.label else "") + ".json"
    write_json(RESULTS / name, out)
    print(f"wrote {RESULTS / name}")


if __name__ == "__main__":
    main()
