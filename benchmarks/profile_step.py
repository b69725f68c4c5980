"""Where an engine step's time goes: host phases timed with CUDA syncs, then the top GPU kernels.

    PYTHONPATH=. python3 benchmarks/profile_step.py [--num-requests 64] [--output FILE]

Runs a prefix of the throughput workload and wraps the scheduler, input preparation, forward pass,
sampler and bookkeeping with timers (synchronising the GPU around each, so the sum is slower than
a plain run: read it as shares, not as the speed).
"""

from __future__ import annotations

import argparse
import collections
import time

from common import CONFIGS, RESULTS, environment, write_json
from throughput import workload


def timed(table: dict, name: str, fn, calls: list | None = None):
    import torch

    def wrapper(*args, **kwargs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        torch.cuda.synchronize()
        table[name] += time.perf_counter() - t0
        if calls is not None:
            calls.append((int(args[0].shape[0]), round((time.perf_counter() - t0) * 1e3, 3)))
        return result

    return wrapper


def main() -> None:
    import torch

    from model_optimizer import LLM, SamplingParams

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--output", default=str(RESULTS / "profile_step_h200.json"))
    parser.add_argument("--quantization", default=None, help="weights quantized at load time: fp8, int8, rtn-int4")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    parser.add_argument("--profile-batch", type=int, default=32, help="sequences decoding in the profiled steps")
    args = parser.parse_args()
    extra = {"quantization": args.quantization} if args.quantization else {}
    prompts, output_lens = workload(args.num_requests)
    llm = LLM(
        str(CONFIGS / "qwen3-0.6b"),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=4096,
        max_num_batched_tokens=16384,
        kv_cache_dtype=args.kv_cache_dtype,
        **extra,
    )
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, detokenize=False))
    phases: dict[str, float] = collections.defaultdict(float)
    engine, runner = llm.engine, llm.runner
    engine.scheduler.schedule = timed(phases, "schedule", engine.scheduler.schedule)
    engine.scheduler.update_from_output = timed(phases, "update_from_output", engine.scheduler.update_from_output)
    runner.batch.prepare = timed(phases, "prepare_inputs", runner.batch.prepare)
    runner.sampler.sample = timed(phases, "sampler", runner.sampler.sample)
    if runner.decode_runner is not None:
        runner.decode_runner.run = timed(phases, "decode_graph_replay", runner.decode_runner.run)
    eager_calls: list = []
    runner.model.forward = timed(phases, "eager_forward", runner.model.forward, eager_calls)
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=n, detokenize=False) for n in output_lens]
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params)
    total = time.perf_counter() - t0
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    steps = engine.stats().num_steps
    # GPU kernels of a few decode steps at full batch
    for i, p in enumerate((prompts * (1 + args.profile_batch // len(prompts)))[: args.profile_batch]):
        engine.add_request(f"prof-{i}", p, SamplingParams(max_tokens=40, ignore_eos=True, detokenize=False))
    for _ in range(5):
        engine.step()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(10):
            engine.step()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    while engine.has_unfinished_requests():
        engine.step()
    result = {
        "benchmark": "profile_step",
        "environment": environment(),
        "num_requests": args.num_requests,
        "quantization": args.quantization,
        "kv_cache_dtype": args.kv_cache_dtype,
        "profile_batch": args.profile_batch,
        "seconds": total,
        "steps": steps,
        "output_tokens": generated,
        "phases_s": dict(phases),
        "ms_per_step": {k: v / steps * 1e3 for k, v in phases.items()},
        "kernel_table": table,
        "eager_calls_tokens_ms": eager_calls,
    }
    write_json(args.output, result)
    print(f"{generated / total:.0f} tok/s (synchronised), {steps} steps, {total / steps * 1e3:.2f} ms/step")
    for name, value in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"  {name:22s} {value / steps * 1e3:7.3f} ms/step")
    print("eager forward calls (tokens, ms):", eager_calls[:20], "... total", len(eager_calls))
    print(table)


if __name__ == "__main__":
    main()
