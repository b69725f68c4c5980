"""Where a verifying step's time goes at one request, on the device's clock and the host's, beside a plain step.

    PYTHONPATH=. python3 benchmarks/spec_step_timeline.py [--device cpu|cuda] [--model DIR] [--output FILE]

At one request a step that verifies k = 4 n-gram proposals (acceptance forced to 1) should cost about
one forward of 5 tokens; on the H200 it took 8.1 ms against a 4.8 ms decode step, while CUDA events
around the runner's launch gave 5.7 ms. This splits each step into:
- `gap_ms`: wall time from the previous step's ids reaching the host to this step's launch (the engine's
  host work between steps: outputs, proposals, scheduling); `device_idle_ms`: the device's own view of
  it, from the previous launch's last work to this launch's first event (CUDA);
- `prep_ms` (device clock): launch entry to the forward's start (input building and the copy in),
  `forward_ms`: the forward (a graph replay, or eager: `graphed` says which), `after_ms`: logits,
  sampling and the copy of the ids out;
- `launch_host_ms`: wall time inside `launch`; `cycle_ms`: launch to the next launch (wall).
A plain step is launched before the previous one is collected (asynchronous scheduling), so its gap spans
that step: for plain steps read `cycle_ms` and the device figures.
Medians over the steps of each kind (plain decode steps; verifying steps), one request of 256 tokens
after a warm-up. Default model: a tiny Llama (the CPU run checks the instrumentation; its figures are
host work); `--model` takes a config folder (dummy weights). spec_decode.py runs it on its 8B engine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from common import RESULTS, environment, write_json
from spec_host_overhead import K, model_or_tiny, one_request_engine, repeating_prompt

OUTPUT_LEN = 256
"""One request's output (the prompt, k and the engine are spec_host_overhead.py's)."""
FIELDS = ("gap_ms", "device_idle_ms", "prep_ms", "forward_ms", "after_ms", "launch_host_ms", "cycle_ms")


class Recorder:
    """Wall-clock stamps and CUDA events at the points a step passes, from wrappers on the engine's own
    objects; `restore` takes them off."""

    def __init__(self, runner) -> None:
        import torch

        self.cuda = runner.device.type == "cuda"
        self.torch = torch
        self.steps: list[dict] = []
        self.ready: list[float] = []
        self._undo: list = []
        self._wrap(runner, "launch", self._launch)
        for padded in (runner.decode_runner, runner.verify_runner):
            if padded is not None:
                self._wrap(padded, "run", self._forward(graphed=padded.use_graphs))
        self._wrap(runner.model, "forward", self._forward(graphed=False))
        from model_optimizer.runtime.runner.step_handle import StepHandle

        self._wrap(StepHandle, "wait", self._wait)

    def _event(self):
        if not self.cuda:
            return None
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _launch(self, fn):
        def launch(out, *args, **kwargs):
            step = {"verify": bool(out.spec_token_ids), "prompt": out.num_prompt_tokens > 0, "graphed": None}
            step["rows"] = len(out.num_scheduled_tokens)
            step["t_entry"], step["e_entry"] = time.perf_counter(), self._event()
            self.steps.append(step)
            result = fn(out, *args, **kwargs)
            step["t_exit"], step["e_exit"] = time.perf_counter(), self._event()
            return result

        return launch

    def _forward(self, graphed: bool):
        def wrap(fn):
            def forward(*args, **kwargs):
                step = self.steps[-1] if self.steps else None
                first = step is not None and step["graphed"] is None  # the target's forward, not a nested one
                if first:
                    step["graphed"], step["e_fwd0"] = graphed, self._event()
                result = fn(*args, **kwargs)
                if first:
                    step["e_fwd1"] = self._event()
                return result

            return forward

        return wrap

    def _wait(self, fn):
        def wait(handle, *args, **kwargs):
            result = fn(handle, *args, **kwargs)
            self.ready.append(time.perf_counter())
            return result

        return wait

    def _wrap(self, obj, name: str, make) -> None:
        own = obj.__dict__.get(name)
        setattr(obj, name, make(getattr(obj, name)))
        self._undo.append(lambda: setattr(obj, name, own) if own is not None else delattr(obj, name))

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def per_step(steps: list[dict], ready: list[float]) -> list[dict]:
    """Each launched step's figures (FIELDS), from the stamps; device ones only where CUDA events exist."""
    rows = []
    for i, step in enumerate(steps):
        row = {"verify": step["verify"], "prompt": step["prompt"], "graphed": step["graphed"], "rows": step["rows"]}
        before = [t for t in ready if t <= step["t_entry"]]
        if before and i:
            row["gap_ms"] = 1e3 * (step["t_entry"] - before[-1])
        if i + 1 < len(steps):
            row["cycle_ms"] = 1e3 * (steps[i + 1]["t_entry"] - step["t_entry"])
        row["launch_host_ms"] = 1e3 * (step["t_exit"] - step["t_entry"])
        if step.get("e_entry") is not None:
            row["prep_ms"] = step["e_entry"].elapsed_time(step.get("e_fwd0") or step["e_exit"])
            if step.get("e_fwd1") is not None:
                row["forward_ms"] = step["e_fwd0"].elapsed_time(step["e_fwd1"])
                row["after_ms"] = step["e_fwd1"].elapsed_time(step["e_exit"])
            if i:
                row["device_idle_ms"] = steps[i - 1]["e_exit"].elapsed_time(step["e_entry"])
        rows.append(row)
    return rows


def summarize(rows: list[dict], verify: bool) -> dict:
    """Medians over the steps of one kind (prompt steps and their successors left out)."""
    picked = [
        r for i, r in enumerate(rows) if r["verify"] == verify and not r["prompt"] and i and not rows[i - 1]["prompt"]
    ]
    out: dict = {"steps": len(picked), "graphed_share": _share([r["graphed"] for r in picked])}
    for name in FIELDS:
        values = [r[name] for r in picked if name in r]
        out[name] = round(statistics.median(values), 4) if values else None
    return out


def _share(flags: list) -> float | None:
    known = [f for f in flags if f is not None]
    return round(sum(known) / len(known), 3) if known else None


def timeline(llm, verify: bool) -> dict:
    """`llm` (speculating as set up) generating one request: the medians of its plain or verifying steps."""
    from model_optimizer import SamplingParams

    prompt = repeating_prompt(llm.runner.vocab_size)
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True, detokenize=False)
    llm.generate([prompt], params)  # warm-up
    recorder = Recorder(llm.runner)
    try:
        llm.generate([prompt], params)
    finally:
        recorder.restore()
    if recorder.cuda:
        recorder.torch.cuda.synchronize()
    return summarize(per_step(recorder.steps, recorder.ready), verify)


def batch_timeline(llm, prompts: list[list[int]], params) -> dict:
    """`llm` generating `prompts` at once (after a warm-up with the same prompts): for steps without prompt
    tokens, how many verified, the share of those run from a graph, and the median forward and cycle of the
    graphed and the eager ones; `steps` lists every step as [rows, verify, prompt, graphed, cycle_ms]."""
    llm.generate(prompts, params)  # warm-up
    recorder = Recorder(llm.runner)
    try:
        llm.generate(prompts, params)
    finally:
        recorder.restore()
    if recorder.cuda:
        recorder.torch.cuda.synchronize()
    rows = per_step(recorder.steps, recorder.ready)
    decode = [r for r in rows if not r["prompt"]]
    out: dict = {"steps": len(rows), "prompt_steps": len(rows) - len(decode)}
    for kind, verify in (("verify", True), ("plain", False)):
        picked = [r for r in decode if r["verify"] == verify]
        out[kind] = {"steps": len(picked), "graphed_share": _share([r["graphed"] for r in picked])}
        for graphed in (True, False):
            group = [r for r in picked if r["graphed"] is graphed]
            for name in ("forward_ms", "cycle_ms"):
                values = [r[name] for r in group if name in r]
                label = f"{'graphed' if graphed else 'eager'}_{name}"
                out[kind][label] = round(statistics.median(values), 4) if values else None
    out["per_step"] = [
        [r["rows"], r["verify"], r["prompt"], r["graphed"], round(r.get("cycle_ms", 0.0), 3)] for r in rows
    ]
    return out


def measure(model: str, device: str) -> dict:
    llm = one_request_engine(model, device, speculate=True)
    speculator = llm.engine.core.speculator
    llm.engine.core.speculator = None
    out = {"plain": timeline(llm, verify=False)}
    llm.engine.core.speculator = speculator
    llm.runner.verifier.force_acceptance(1.0)
    out["verify"] = timeline(llm, verify=True)
    return out


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default=None, help="config folder (dummy weights); default: a tiny Llama")
    parser.add_argument("--output", default=None, help="default: results/spec_step_timeline_<device>.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure(model_or_tiny(args.model, tmp), args.device)
    print(json.dumps(figures, indent=1))
    payload = {
        "benchmark": "spec_step_timeline",
        "environment": environment(),
        "config": {"model": args.model or "tiny llama (2 x 64)", "device": args.device, "k": K, "acceptance": 1.0},
        "figures": figures,
    }
    output = args.output or str(RESULTS / f"spec_step_timeline_{args.device}.json")
    print(f"saved {write_json(output, payload)}")


if __name__ == "__main__":
    main()
