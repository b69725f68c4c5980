"""Host-side cost of an engine step (scheduler, runner inputs, bookkeeping), without the model.

    PYTHONPATH=. python3 benchmarks/host_overhead.py [--output FILE]

The runner's forward pass and sampler are replaced by a fixed token, so what is timed is the
Python work of every step (with asynchronous scheduling it overlaps the GPU's work): 256 requests of nano-vllm-like
lengths (prompts 100-400 tokens, outputs 100-1000) on the built-in model's config.
`cpu_ms_per_step` counts this process's CPU time only: on a machine shared with other work it moves
far less from run to run than the wall-clock `ms_per_step`, so compare that one between versions.

`decode_inputs_us` times the runner's input building alone (InputBatch.update + prepare, best of 5
rounds of 200 steps, CPU time) for steady decode batches of 1, 32 and 256 requests, the part of a
small-batch decode step that the [arch] refactor moved. `--device cuda` times it on a GPU, where it
includes the staging copy and the block-table gather (the whole engine run stays on the CPU).
"""

from __future__ import annotations

import argparse
import inspect
import random
import time

from common import RESULTS, environment, write_json


def decode_inputs_us(device_name: str, batch_sizes: tuple[int, ...] = (1, 32, 256)) -> dict[str, float]:
    """Microseconds of CPU time per steady decode step spent in InputBatch.update + prepare."""
    import torch

    from model_optimizer.runtime.engine.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
    from model_optimizer.runtime.runner.input_batch import InputBatch
    from model_optimizer.runtime.sampling_params import SamplingParams

    params, prompt_len, block_size = SamplingParams(max_tokens=4096), 200, 16
    accepted = inspect.signature(InputBatch).parameters  # trees before the step buffer lack the budget: this
    # script, copied into such a tree, times its InputBatch too
    result = {}
    for n in batch_sizes:
        size = {"max_num_batched_tokens": n * prompt_len} if "max_num_batched_tokens" in accepted else {}
        batch = InputBatch(256, 4096, block_size, torch.device(device_name), **size)
        ids = [f"r{i}" for i in range(n)]
        blocks = -(-(prompt_len + 1100) // block_size)  # room for every token decoded below
        new = [
            NewRequestData(r, list(range(3, 3 + prompt_len)), [], params, list(range(i * blocks, (i + 1) * blocks)), 0)
            for i, r in enumerate(ids)
        ]
        first = SchedulerOutput(
            new_requests=new, num_scheduled_tokens=dict.fromkeys(ids, prompt_len), sampling_request_ids=set(ids)
        )
        batch.update(first)
        batch.prepare(first, {})
        computed, rounds = prompt_len, []
        for _ in range(5):
            start = time.process_time()
            for _ in range(200):
                for state in batch.requests.values():
                    state.output_token_ids.append(7)
                out = SchedulerOutput(
                    cached_requests=[CachedRequestData(r, [], computed) for r in ids],
                    num_scheduled_tokens=dict.fromkeys(ids, 1),
                    sampling_request_ids=set(ids),
                )
                batch.update(out)
                batch.prepare(out, {})
                computed += 1
            rounds.append((time.process_time() - start) / 200 * 1e6)
        if device_name == "cuda":
            torch.cuda.synchronize()
        result[str(n)] = round(min(rounds), 2)
    return result


def main() -> None:
    import torch

    from model_optimizer import LLM, SamplingParams
    from model_optimizer.runtime.layers.sampler import SampledTokens
    from model_optimizer.runtime.runner.step_handle import StepHandle

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--output", default=str(RESULTS / "host_overhead_cpu.json"))
    parser.add_argument("--device", default="cpu", help="where decode_inputs_us builds its inputs (cpu or cuda)")
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
        "decode_inputs_device": args.device,
        "decode_inputs_us": decode_inputs_us(args.device),
    }
    write_json(args.output, result)
    print(
        f"{result['ms_per_step']:.3f} ms of host work per step ({result['cpu_ms_per_step']:.3f} ms of CPU time) "
        f"over {steps} steps; decode inputs (us per step by batch size): {result['decode_inputs_us']}"
    )


if __name__ == "__main__":
    main()
