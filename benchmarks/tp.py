"""Tensor parallelism on one host: decode step time, throughput, all-reduce cost (2 GPUs needed).

    PYTHONPATH=. python3 benchmarks/tp.py engine --model llama-3.1-8b --tp 2 [--throughput] --output FILE
    PYTHONPATH=. python3 benchmarks/tp.py allreduce --output FILE
    PYTHONPATH=. python3 benchmarks/tp.py merge --output FILE PART.json ...

`engine` loads one config from benchmarks/configs/ with dummy bf16 weights at the given
tensor_parallel_size and measures, at batch 1, 8 and 64 with a 512-token context, the median time
between consecutive engine steps in steady decoding (what a user waits per token), then, for
TP > 1, profiles 16 decode steps on rank 0 (runtime/executor/step_profile.py): all-reduce kernel time per
step against all kernel time. With --throughput it then runs nano-vllm's offline workload
(benchmarks/throughput.py: 256 requests, lengths 100-1024) on the same engine.

`allreduce` compares, in two processes on GPUs 0 and 1, NCCL's all_reduce with torch's
symmetric-memory one-shot all-reduce (torch.ops.symm_mem.one_shot_all_reduce, where this torch has
it) for decode-sized messages (batch x hidden x 2 bytes), each timed as 100 calls inside one CUDA
graph (what a captured decode step does) and eagerly.

Each part is its own process so one that fails or runs out of time costs only its own figures;
scripts/device/tp_h200x2.sh runs them all and `merge` gathers the JSON files into one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json

CONTEXT = 512
DECODE_STEPS = 64
PROFILE_STEPS = 16


def decode_rows(llm, model: str, tp: int, batch_sizes: list[int]) -> list[dict]:
    from model_optimizer import SamplingParams

    engine, rows = llm.engine, []
    for batch in batch_sizes:
        params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=DECODE_STEPS, detokenize=False)
        for i in range(batch):
            engine.add_request(f"{tp}-{batch}-{i}", [(i * 7 + j) % 1000 + 1 for j in range(CONTEXT)], params)
        marks: list[float] = []
        profile: dict | None = None
        while engine.has_unfinished_requests():
            outs = engine.step()
            if len(outs) == batch and all(len(o.outputs[0].token_ids) > 2 for o in outs):
                marks.append(time.perf_counter())  # steady decoding: every request got a token
                if len(marks) == 24 and tp > 1 and hasattr(llm.runner, "start_profile"):
                    llm.runner.start_profile()
                if len(marks) == 24 + PROFILE_STEPS and tp > 1 and hasattr(llm.runner, "stop_profile"):
                    profile = llm.runner.stop_profile()
        times = [b - a for a, b in zip(marks, marks[1:])]
        unprofiled = times[2:23] + times[24 + PROFILE_STEPS :]  # the profiler slows the steps it records
        step = statistics.median(unprofiled) if len(unprofiled) > 4 else float("nan")
        row = {
            "model": model,
            "tensor_parallel_size": tp,
            "batch": batch,
            "context": CONTEXT,
            "ms_per_step": step * 1e3,
            "tokens_per_s": batch / step,
            "decode_steps_timed": len(unprofiled),
        }
        if profile:
            row["all_reduce_ms_per_step"] = profile["all_reduce_us_per_step"] / 1e3
            row["kernel_ms_per_step"] = profile["kernel_us_per_step"] / 1e3
            row["profile"] = profile
        rows.append(row)
        extra = f", all-reduce {row['all_reduce_ms_per_step']:.3f} ms/step" if profile else ""
        print(f"{model} tp {tp} batch {batch}: {step * 1e3:.3f} ms/step{extra}", flush=True)
    return rows


def throughput(llm) -> dict:
    from throughput import workload

    from model_optimizer import SamplingParams

    prompts, output_lens = workload(256)
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=n, detokenize=False) for n in output_lens]
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=8, detokenize=False))
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - t0
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    stats = llm.engine.stats()
    print(f"throughput: {generated / seconds:.0f} output tok/s ({generated} tokens in {seconds:.1f} s)", flush=True)
    return {
        "requests": len(prompts),
        "output_tokens": generated,
        "seconds": seconds,
        "output_tok_per_s": generated / seconds,
        "num_kv_blocks": stats.num_blocks,
        "preemptions": stats.num_preemptions,
    }


def run_engine(args, result: dict) -> dict:
    from model_optimizer import LLM

    t0 = time.perf_counter()
    llm = LLM(
        str(CONFIGS / args.model),
        load_format="dummy",
        dtype="bfloat16",
        tensor_parallel_size=args.tp,
        max_model_len=4096 if args.throughput else CONTEXT + DECODE_STEPS + 8,
        max_num_seqs=256 if args.throughput else max(args.batch_sizes),
        max_num_batched_tokens=16384 if args.throughput else 8192,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    result.update(model=args.model, tensor_parallel_size=args.tp, startup_s=time.perf_counter() - t0)
    print(f"{args.model} tp {args.tp}: engine ready in {result['startup_s']:.1f} s", flush=True)
    try:
        result["decode"] = decode_rows(llm, args.model, args.tp, args.batch_sizes)
        write_json(args.output, result)  # kept should the throughput run not finish in its time
        if args.throughput:
            result["throughput"] = throughput(llm)
    finally:
        llm.close()
    return result


# ----------------------------------------------------------------- all-reduce micro-benchmark
def allreduce_rank(rank: int, size: int, init_file: str, sizes: list[tuple[str, int]], queue) -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", world_size=size, rank=rank, device_id=device)
    for name, make in (("nccl", _nccl), ("one_shot", _one_shot)):
        for label, numel in sizes:
            row = {"message": label, "bytes": numel * 2, "op": name}
            _measure(row, name, lambda n=numel, make=make: make(n, device))
            if rank == 0:
                queue.put(row)  # as it comes: an op that hangs later costs only its own rows
    if rank == 0:
        queue.put(None)
    dist.destroy_process_group()


def _nccl(numel: int, device):
    import torch
    import torch.distributed as dist

    x = torch.ones(numel, dtype=torch.bfloat16, device=device)
    return lambda: dist.all_reduce(x)


def _measure(row: dict, name: str, make) -> None:
    """`name`_graph_us and `name`_eager_us in `row`, or `name`_error when the op is absent or fails here.
    Both ranks take the same path: an op that fails, fails on both before any collective call."""
    try:
        fn = make()
        row[f"{name}_graph_us"] = _timed(fn, graph=True)
        row[f"{name}_eager_us"] = _timed(fn, graph=False)
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]


def _one_shot(numel: int, device):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    group = dist.group.WORLD.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group)
    buffer = symm_mem.empty(numel, dtype=torch.bfloat16, device=device)
    symm_mem.rendezvous(buffer, group)
    buffer.fill_(1)
    op = torch.ops.symm_mem.one_shot_all_reduce
    result = op(buffer, "sum", group)
    torch.cuda.synchronize()
    if float(result[0]) != dist.get_world_size():
        raise RuntimeError(f"one_shot_all_reduce gave {float(result[0])}, expected {dist.get_world_size()}")
    return lambda: op(buffer, "sum", group)


def _timed(fn, graph: bool, calls: int = 100) -> float:
    """Microseconds per call: `calls` calls captured in one CUDA graph and replayed, or launched eagerly."""
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(g, stream=stream):
                for _ in range(calls):
                    fn()
        run = g.replay
    else:

        def run() -> None:
            for _ in range(calls):
                fn()

    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def run_allreduce(args, result: dict) -> dict:
    import tempfile

    import torch.multiprocessing as mp

    sizes = [(f"batch {b} x hidden {h}", b * h) for h in (4096, 8192) for b in (1, 8, 64)]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = str(Path(tmp) / "rendezvous")
        procs = [ctx.Process(target=allreduce_rank, args=(r, 2, init, sizes, queue)) for r in range(2)]
        for p in procs:
            p.start()
        rows: list[dict] = []
        deadline = time.monotonic() + args.timeout
        try:
            while (row := queue.get(timeout=max(deadline - time.monotonic(), 0.1))) is not None:
                rows.append(row)
        except Exception:  # noqa: BLE001 - out of time (queue.Empty): keep the rows that came
            rows.append({"error": f"no more rows within {args.timeout:.0f} s"})
        finally:
            for p in procs:
                p.join(3)
                if p.is_alive():
                    p.kill()
    for row in rows:
        print(json.dumps(row), flush=True)
    return {"allreduce": rows}


def merge(args, result: dict) -> dict:
    merged: dict = {"benchmark": "tensor_parallel", "parts": {}}
    for path in args.parts:
        try:
            merged["parts"][Path(path).stem] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            merged["parts"][Path(path).stem] = {"error": str(exc)}
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["engine", "allreduce", "merge"])
    parser.add_argument("parts", nargs="*", help="merge: the JSON files to gather")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--throughput", action="store_true", help="engine: also nano-vllm's offline workload")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--timeout", type=float, default=120, help="allreduce: seconds to wait for the ranks")
    parser.add_argument("--output", default=str(RESULTS / "tp_h200x2.json"))
    args = parser.parse_args()
    result: dict = {"environment": environment(), "config": vars(args)}
    try:
        result.update({"engine": run_engine, "allreduce": run_allreduce, "merge": merge}[args.part](args, result))
    except Exception:  # noqa: BLE001 - the error goes into the result file, which is still written
        result["error"] = traceback.format_exc()
        print(result["error"], flush=True)
    write_json(args.output, result)


if __name__ == "__main__":
    main()
