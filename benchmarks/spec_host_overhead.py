"""Host time of a speculative step against a plain decode step, at one request (where speculation should pay most).

    PYTHONPATH=. python3 benchmarks/spec_host_overhead.py [--device cpu|cuda] [--model DIR] [--output FILE]

A speculative step is synchronous: the scheduler must know how many proposals the last step kept
before it schedules the next, so the device idles from the moment a verifying step's ids are on the
host until the next step's forward starts. That window is what this measures, per phase, for n-gram
proposals (k = 4) at acceptance 1 (the benchmark knob: every proposal kept), beside a plain decode
step (asynchronous: its host work hides behind the device's).

Per mode: `ms_per_step` (wall), `host_ms_per_step` (the engine thread's CPU time less the wait for
the device's ids and, on the CPU, less the model's forward, logits and sampling, which are the
device's work there), and for the speculative mode `exposed_ms` (median CPU time from a verifying
step's ids being on the host to the next forward; `exposed_p10_ms` its 10th percentile, which moves
less with other work on a shared machine), split into phases by when each one ended. Default model: a tiny Llama config (2
layers of width 64) with dummy weights, so the CPU run is mostly host work; `--model` takes a config
folder (dummy weights too). 512 output tokens after a 256-token prompt that repeats a 32-token
phrase, three timed runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from common import RESULTS, environment, write_json

K = 4
NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": K,
    "adaptive": False,
    "prompt_lookup_min": 1,
    "prompt_lookup_max": 4,
}
"""n-gram as the README figures were measured: lookup bounds 1-4 (the default is now 5-5, as vLLM)."""
PROMPT_LEN, OUTPUT_LEN, RUNS = 256, 512, 3
TINY = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    vocab_size=1032,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    torch_dtype="float32",
    eos_token_id=2,
    bos_token_id=1,
    tie_word_embeddings=False,
)
clock = time.thread_time
"""Every mark is this thread's CPU time, not the wall clock: on a machine shared with other work the wall
clock moves with their load, CPU time barely (on a GPU, the wait for the device spins, and is set apart)."""

PHASES = [  # (mark, phase that ends there), in the order a step reaches them
    ("update_from_output", "collect + update"),
    ("step_return", "outputs + frontend"),
    ("propose", "policy + proposals"),
    ("schedule", "schedule"),
    ("prepare", "runner inputs"),
    ("forward", "launch to forward"),
]


class Marks:
    """Timestamps at the points a step passes, from wrappers around the engine's own methods; `restore` takes
    the wrappers off again (spec_decode.py instruments an engine it goes on using)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self.spans: dict[str, float] = defaultdict(float)
        self._undo: list = []

    def after(self, obj, name: str, mark: str, span: str | None = None) -> None:
        """Mark when `obj.name` returns; add its duration to `span`."""
        fn = getattr(obj, name)

        def wrapper(*args, **kwargs):
            start = clock()
            result = fn(*args, **kwargs)
            end = clock()
            self.events.append((mark, end))
            if span:
                self.spans[span] += end - start
            return result

        self._wrap(obj, name, wrapper)

    def before(self, obj, name: str, mark: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*args, **kwargs):
            self.events.append((mark, clock()))
            return fn(*args, **kwargs)

        self._wrap(obj, name, wrapper)

    def hook(self, model, mark: str) -> None:
        """Mark when `model`'s forward starts."""
        handle = model.register_forward_pre_hook(lambda *_: self.events.append((mark, clock())))
        self._undo.append(handle.remove)

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _wrap(self, obj, name: str, wrapper) -> None:
        own = obj.__dict__.get(name)  # an instance's own attribute, or a class's function
        setattr(obj, name, wrapper)
        self._undo.append(lambda: setattr(obj, name, own) if own is not None else delattr(obj, name))


def instrument(llm, marks: Marks) -> None:
    from model_optimizer.runtime.runner.step_handle import StepHandle

    core, runner = llm.engine.core, llm.runner
    marks.after(StepHandle, "wait", "ready", span="wait")
    marks.after(core.scheduler, "update_from_output", "update_from_output")
    marks.after(core, "step", "step_return")
    if core.speculator is not None:
        marks.after(core.speculator, "propose", "propose")
    marks.after(core.scheduler, "schedule", "schedule")
    marks.after(runner.batch, "prepare", "prepare")
    for padded in (runner.decode_runner, runner.verify_runner):
        if padded is not None:
            marks.before(padded, "run", "forward")
    marks.hook(runner.model, "forward")
    if runner.device.type == "cpu":  # there the forward, logits and sampling are the device's work
        marks.after(runner.model, "forward", "forward_end", span="compute")
        marks.after(runner.model, "compute_logits", "logits_end", span="compute")
        marks.after(runner.sampler, "sample", "sample_end", span="compute")


def windows(events: list[tuple[str, float]]) -> dict[str, list[float]]:
    """Per phase, its duration in each window from 'ready' to the next 'forward' (the first of each mark)."""
    out: dict[str, list[float]] = defaultdict(list)
    i = 0
    while i < len(events):
        if events[i][0] != "ready":
            i += 1
            continue
        start, seen, j = events[i][1], {}, i + 1
        while j < len(events) and events[j][0] not in ("forward", "ready"):
            seen.setdefault(events[j][0], events[j][1])
            j += 1
        if j < len(events) and events[j][0] == "forward":
            seen["forward"] = events[j][1]
            last = start
            for name, phase in PHASES:
                if name in seen:
                    out[phase].append(seen[name] - last)
                    last = seen[name]
            out["exposed"].append(seen["forward"] - start)
        i = j
    return out


def median_ms(values: list[float]) -> float | None:
    return round(1e3 * sorted(values)[len(values) // 2], 4) if values else None


def one_request_engine(model: str, device: str, speculate: bool):  # noqa: ANN201 - an LLM
    """`LLM` on `model`'s config with dummy weights, sized for one request; n-gram speculation with k = K
    (every step, no adaptive policy) when `speculate`. spec_step_timeline.py builds the same engine."""
    from model_optimizer import LLM

    return LLM(
        model,
        load_format="dummy",
        device=device,
        max_model_len=2048,
        max_num_seqs=8,
        enable_prefix_caching=False,
        speculative_config=NGRAM if speculate else None,
        **({"kv_cache_memory": 1 << 26} if device == "cpu" else {"gpu_memory_utilization": 0.5}),
    )


def repeating_prompt(vocab_size: int) -> list[int]:
    """PROMPT_LEN tokens repeating one 32-token phrase: the n-gram lookup finds what follows."""
    rng = random.Random(0)
    phrase = [rng.randrange(10, min(1000, vocab_size)) for _ in range(32)]
    return (phrase * (PROMPT_LEN // 32 + 1))[:PROMPT_LEN]


def model_or_tiny(model: str | None, folder: str) -> str:
    """`model`, or the TINY config written into `folder`."""
    if model is not None:
        return model
    (Path(folder) / "config.json").write_text(json.dumps(TINY))
    return folder


def measure(model: str, device: str, mode: str) -> dict:
    llm = one_request_engine(model, device, speculate=mode == "ngram")
    if mode == "ngram":
        llm.runner.verifier.force_acceptance(1.0)
    row = profile(llm, mode)
    print(json.dumps(row), flush=True)
    return row


def profile(llm, mode: str) -> dict:
    """Host figures of `llm` (speculating as it is set up) generating one request: see the module docstring."""
    from model_optimizer import SamplingParams

    prompt = repeating_prompt(llm.runner.vocab_size)
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True, detokenize=False)
    llm.generate([prompt], params)  # warm-up
    marks = Marks()
    instrument(llm, marks)
    try:
        steps0, start, wall = llm.engine.num_steps, clock(), time.perf_counter()
        for _ in range(RUNS):
            llm.generate([prompt], params)
        seconds, steps = clock() - start, llm.engine.num_steps - steps0
        wall = time.perf_counter() - wall
    finally:
        marks.restore()
    device_s = marks.spans["wait"] + marks.spans["compute"]
    row = {
        "mode": mode,
        "steps": steps,
        "tokens_per_s": RUNS * OUTPUT_LEN / wall,
        "ms_per_step": 1e3 * wall / steps,
        "cpu_ms_per_step": 1e3 * seconds / steps,
        "host_ms_per_step": 1e3 * (seconds - device_s) / steps,
    }
    if mode != "plain":
        phases = windows(marks.events)
        exposed = sorted(phases.pop("exposed", []))
        row["exposed_ms"] = median_ms(exposed)
        row["exposed_p10_ms"] = round(1e3 * exposed[len(exposed) // 10], 4) if exposed else None
        row["exposed_phases_ms"] = {phase: median_ms(v) for phase, v in phases.items()}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default=None, help="config folder (dummy weights); default: a tiny Llama")
    parser.add_argument("--output", default=None, help="default: results/spec_host_overhead_<device>.json")
    parser.add_argument("--label", default="", help="stored with the figures (e.g. before / after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = model_or_tiny(args.model, tmp)
        rows = [measure(model, args.device, mode) for mode in ("plain", "ngram")]
    payload = {
        "benchmark": "spec_host_overhead",
        "label": args.label,
        "environment": environment(),
        "config": {"model": args.model or "tiny llama (2 x 64)", "device": args.device, "k": K, "acceptance": 1.0},
        "rows": rows,
    }
    output = args.output or str(RESULTS / f"spec_host_overhead_{args.device}.json")
    print(f"saved {write_json(output, payload)}")


if __name__ == "__main__":
    main()
