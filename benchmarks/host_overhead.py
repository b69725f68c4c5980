"""Host-side cost of an engine step (scheduler, runner inputs, bookkeeping), without the model.

    PYTHONPATH=. python3 benchmarks/host_overhead.py [--output FILE]

The runner's forward pass and sampler are replaced by a fixed token, so what is timed is the
Python work of every step (with asynchronous scheduling it overlaps the GPU's work): 256 requests of nano-vllm-like
lengths (prompts 100-400 tokens, outputs 100-1000) on the built-in model's config.
`cpu_ms_per_step` counts this process's CPU time only: on a machine shared with other work it moves
far less from run to run than the wall-clock `ms_per_step`, so compare that one between versions.
"""

from __future__ import annotations

import argparse
import random
import time

from common import RESULTS, environment, write_json


def main() -> None:
    import torch

    from model_optimizer import LLM, SamplingParams
    from model_optimizer.layers.sampler import SampledTokens
    from model_optimizer.runner.step_handle import StepHandle

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--output", default=str(RESULTS / "host_overhead_cpu.json"))
    args = parser.parse_args()
    llm = LLM(kv_cache_memory=1 << 28, max_num_seqs=args.num_requests, max_model_len=2048, device="cpu")
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 1000) for _ in range(rng.randint(100, 400))] for _ in range(args.num_requests)]
    params = [
        SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=rng.randint(100, 1000), detokenize=False)
        for _ in range(args.num_requests)
    ]
    runner = llm.runner

    def no_model(out, pending=None):  # the runner's launch without the device work: every sampled token is 5
        runner.batch.update(out)
        inputs = runner.batch.prepare(out, pending.pending_for_next() if pending is not None else {})
        batch = [s.sampling_input(p) for s, p in zip(inputs.sample_states, inputs.sample_positions)]
        sampled = SampledTokens(torch.full((len(batch),), 5), torch.ones(len(batch), dtype=torch.bool))
        return StepHandle(inputs.sample_states, batch, sampled)

    runner.launch = no_model
    t0, cpu0 = time.perf_counter(), time.process_time()
    llm.generate(prompts, params)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0
    steps = llm.engine.stats().num_steps
    result = {
        "benchmark": "host_overhead",
        "environment": environment(),
        "num_requests": args.num_requests,
        "steps": steps,
        "seconds": seconds,
        "ms_per_step": seconds / steps * 1e3,
        "cpu_seconds": cpu_seconds,
        "cpu_ms_per_step": cpu_seconds / steps * 1e3,
    }
    write_json(args.output, result)
    print(
        f"{result['ms_per_step']:.3f} ms of host work per step ({result['cpu_ms_per_step']:.3f} ms of CPU time) "
        f"over {steps} steps"
    )


if __name__ == "__main__":
    main()
