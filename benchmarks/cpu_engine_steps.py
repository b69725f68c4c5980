"""How long our engine's step takes on this CPU, by batch: what the tuner's CPU prior is made of.

The built-in model (or --model) generates 30 tokens for 1, 4, 16 and 64 sequences at once, after a
warm-up; each step is timed in CPU time of this process (one intra-op thread, so CPU time is what a
quiet machine would spend: a neighbour's load lengthens wall time, not CPU time) and in wall time.
Beside them: the matmul figures environment/cpu_speed.py measured here, which the tuner's predictor
divides by (optimizer/tune/step_fit.py's CPU_STEP_MS_PER_LAYER and CPU_SEQ_MS_PER_LAYER come from
this file's figures).

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/cpu_engine_steps.py
Writes benchmarks/results/cpu_engine_steps.json (or --output).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from common import RESULTS, environment, write_json

BATCHES = (1, 4, 16, 64)
NUM_TOKENS = 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model folder (default: the built-in model)")
    parser.add_argument("--dtype", default="auto", help="auto: what this CPU runs a bf16 checkpoint in fastest")
    parser.add_argument("--output", default=str(RESULTS / "cpu_engine_steps.json"))
    args = parser.parse_args()

    from model_optimizer import LLM, SamplingParams
    from model_optimizer.environment.cpu_speed import cpu_speed

    llm = LLM(args.model, max_model_len=512, kv_cache_memory=1 << 27, dtype=args.dtype)
    params = SamplingParams(max_tokens=NUM_TOKENS, temperature=0, ignore_eos=True)
    steps = []
    for batch in BATCHES:
        llm.generate(["warm up"] * batch, params)
        cpu, wall = time.process_time(), time.perf_counter()
        llm.generate(["The json module"] * batch, params)
        steps.append(
            {
                "batch": batch,
                "cpu_ms_per_step": round((time.process_time() - cpu) / NUM_TOKENS * 1e3, 2),
                "wall_ms_per_step": round((time.perf_counter() - wall) / NUM_TOKENS * 1e3, 2),
            }
        )
        print(steps[-1], flush=True)
    args_ = llm.runner.args
    result = {
        "benchmark": "cpu_engine_steps",
        "environment": environment(),
        "model": {"dir": str(llm.model_dir), "num_layers": args_.num_layers, "dtype": str(llm.runner.dtype)[6:]},
        "cpu_speed": dataclasses.asdict(cpu_speed()),
        "num_tokens": NUM_TOKENS,
        "steps": steps,
    }
    write_json(Path(args.output), result)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
