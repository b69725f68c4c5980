"""Randomized stress search of the engine's exactness: scheduling, paged KV, prefix cache, preemption.

Each seed draws engine settings and a workload (tests/runtime/engine/stress_workloads.py), runs it on the
CPU in float32 with a tiny Qwen3 checkpoint, and compares every request with the same request alone on a
roomy, plain engine, checking the engine's bookkeeping between steps and after the run
(tests/runtime/engine/stress_harness.py). Failures are printed with their seed; `--seed N` replays one and
`--shrink` cuts a failing workload down to a minimal one, printed as Python for a regression test.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/engine_stress.py --minutes 12
    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/engine_stress.py --seed 1234 --shrink
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path


class Models:
    """The tests' tiny checkpoints (tests/conftest.py's TINY_MODELS), each built once into `folder` when first
    asked for, and its reference engine (stress_outputs.Reference)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.references: dict = {}

    def folder_of(self, name: str) -> str:
        from tests import tiny_checkpoints as tiny
        from tests.conftest import TINY_MODELS

        out = self.folder / name
        if not (out / "config.json").exists():
            kind, overrides = TINY_MODELS[name]
            tiny.build_checkpoint(out, tiny.tiny_config(kind, **overrides), seed=zlib.crc32(name.encode()) % 1000)
        return str(out)

    def run(self, workload, coverage: Counter | None = None) -> list:  # noqa: ANN001 - a Workload
        """run_workload on the workload's model."""
        from tests.runtime.engine.stress_harness import Reference, run_workload

        folder = self.folder_of(workload.model)
        if workload.model not in self.references:
            self.references[workload.model] = Reference(folder)
        return run_workload(folder, workload, self.references[workload.model], coverage)


def shrink(models: Models, workload, findings):  # noqa: ANN001, ANN201
    """A smaller workload that still fails with a finding of the same kind: arrivals dropped, prompts and
    max_tokens cut, aborts and extras removed, one change at a time while any helps."""
    kind = findings[0].kind

    def fails(candidate) -> bool:  # noqa: ANN001
        return any(f.kind == kind for f in models.run(candidate))  # near ties never shrink

    changed = True
    while changed:
        changed = False
        for candidate in _smaller(workload):
            if fails(candidate):
                workload, changed = candidate, True
                break
    return workload


OPTIONAL_PARAMS = (
    "stop",
    "stop_token_ids",
    "logprobs",
    "prompt_logprobs",
    "min_tokens",
    "repetition_penalty",
    "output_kind",
)
"""SamplingParams a shrink tries to do without."""


def _smaller(workload):  # noqa: ANN001, ANN202
    """Candidates one step smaller than `workload`, biggest cuts first."""
    arrivals = workload.arrivals
    for i in range(len(arrivals)):
        yield dataclasses.replace(workload, arrivals=arrivals[:i] + arrivals[i + 1 :])
    for i, arrival in enumerate(arrivals):
        for variant in _simpler(arrival):
            yield dataclasses.replace(workload, arrivals=arrivals[:i] + [variant] + arrivals[i + 1 :])


def _simpler(a):  # noqa: ANN001, ANN202 - an Arrival
    """Variants of one request, each a little simpler: a shorter prompt, no abort, an earlier arrival, fewer
    tokens, one option fewer, one completion."""
    prompts = (
        [a.prompt[: len(a.prompt) // 2], a.prompt[:-1], a.prompt[len(a.prompt) // 2 :]] if len(a.prompt) > 1 else []
    )
    variants = [dataclasses.replace(a, prompt=p) for p in prompts]
    if a.abort is not None:
        variants.append(dataclasses.replace(a, abort=None))
    if a.stream:
        variants.append(dataclasses.replace(a, stream=False))
    if a.step:
        variants += [dataclasses.replace(a, step=0), dataclasses.replace(a, step=a.step - 1)]
    if (a.params["max_tokens"] or 0) > 1:
        variants.append(dataclasses.replace(a, params=a.params | {"max_tokens": a.params["max_tokens"] - 1}))
    for key in OPTIONAL_PARAMS:
        if key in a.params:
            variants.append(dataclasses.replace(a, params={k: v for k, v in a.params.items() if k != key}))
    if a.params.get("n", 1) > 1:
        variants.append(dataclasses.replace(a, params=a.params | {"n": 1}))
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0, help="time box of the search")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None, help="run this seed only")
    parser.add_argument("--shrink", action="store_true", help="cut failing workloads down to minimal ones")
    parser.add_argument("--model-dir", default=None, help="where the tiny models are built (default: a temp folder)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    from tests.runtime.engine.stress_workloads import random_workload

    models = Models(Path(args.model_dir or tempfile.mkdtemp(prefix="engine_stress_")))
    seeds = [args.seed] if args.seed is not None else range(args.first_seed, 1 << 30)
    deadline = time.monotonic() + 60 * args.minutes
    num_run = num_failed = num_ties = 0
    coverage: Counter = Counter()
    for seed in seeds:
        if time.monotonic() > deadline:
            break
        workload = random_workload(seed)
        findings = models.run(workload, coverage)
        num_run += 1
        num_ties += sum(f.kind == "near_tie" for f in findings)
        findings = [f for f in findings if f.kind != "near_tie"]
        if findings:
            num_failed += 1
            print(f"seed {seed}: {len(findings)} findings on {workload.model}; {workload.settings}", flush=True)
            for finding in findings[:4]:
                print("   ", finding, flush=True)
            if args.shrink:
                print("    minimal:", shrink(models, workload, findings), flush=True)
    print("coverage:", dict(sorted(coverage.items())), flush=True)
    print(f"{num_run} workloads, {num_failed} failed ({num_ties} float near-ties, not failures)", flush=True)


if __name__ == "__main__":
    main()
