"""Speculative decoding on one GPU: output tokens/s at 1, 8 and 64 concurrent requests, against none.

    PYTHONPATH=. python3 benchmarks/spec_decode.py [--output FILE] [--quick] [--target DIR --draft DIR]

Target: Llama-3.1-8B's config with dummy bf16 weights (benchmarks/configs). Proposers, k = 4 each:
- n-gram (prompt lookup, min 1, max 4) on prompts that repeat a 32-token phrase;
- a Llama-3.2-1B-shaped draft (same vocabulary), dummy weights: it agrees with the target by chance only;
- the target itself as its draft: dummy weights are seeded, so it proposes the target's own greedy tokens
  (acceptance 1 without any knob). Its proposals cost k full 8B forwards, so it measures the mechanism at
  acceptance 1, not a useful configuration: its ceiling is about (k + 1) / (k + 1.05) = 1x.

Each engine holds its draft; "off" is the same engine with speculation switched off (the engine core's
speculator removed), so every row of a concurrency compares the same weights, graphs and KV cache. The
n-gram rows use the 1B engine with its drafter set aside. Rows at 64 requests run twice: with the
adaptive policy (the default: it measures both modes and speculates only where faster) and forced on.

Acceptance sweep: the benchmark knob (Verifier.force_acceptance, MOPT_SPEC_ACCEPTANCE for servers) accepts
each proposal with probability a whatever the target says, so speedup can be read against a; the draft's
work and the target's verify step cost what they would at that acceptance.

A figure: after a warm-up run of the same shape (kernel compiles; the policy's measurements for that batch
size), output tokens over the wall time of one generate() of `concurrency` greedy requests (ignore_eos),
prompt and output lengths fixed, prefix caching off so no run reuses another's prompt. The long rows at
64 (3 x 64 requests, 64 at a time) have no warm-up run and a fresh policy: its learning is in the figure,
and `per_step` lists every step the policy recorded as [running, speculated, steady, ms, tokens].
`step_profile_ms.host` has spec_host_overhead.py's host figures on the same engine (one request), and
`step_profile_ms.timeline` spec_step_timeline.py's split of a plain and a verifying step (device and host clocks),
`step_profile_ms.timeline_c64` its per-step record at 64 requests (which verifying steps ran from a graph).
"""

from __future__ import annotations

import argparse
import json
import random
import time
import zlib
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json

K = 4
PROMPT_LEN = 256
OUTPUT_LEN = {1: 256, 8: 256, 64: 128}
SWEEP = (0.0, 0.25, 0.5, 0.75, 1.0)
LONG_FACTOR = 3
"""The long run at 64: this many times 64 requests (64 at a time), with a fresh policy and no warm-up run."""


def prompts(count: int, seed: int, vocab: int) -> list[list[int]]:
    """`count` prompts, each a random 32-token phrase repeated to PROMPT_LEN tokens (lookup finds it)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        phrase = [rng.randrange(vocab // 100, vocab) for _ in range(32)]
        out.append((phrase * (PROMPT_LEN // 32 + 1))[:PROMPT_LEN])
    return out


def max_positions(folder: str) -> int:
    return json.loads((Path(folder) / "config.json").read_text())["max_position_embeddings"]


def make_llm(target: str, draft: str, util: float):
    from model_optimizer import LLM

    spec = {"model": draft, "num_speculative_tokens": K}
    return LLM(
        target,
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=min(4096, max_positions(target)),
        max_num_seqs=64,
        enable_prefix_caching=False,
        gpu_memory_utilization=util,
        speculative_config=spec,
    )


class Modes:
    """Switches one engine between no speculation, its draft model and n-gram proposals."""

    def __init__(self, llm, draft: str) -> None:
        self.llm, self.draft, self.drafter = llm, draft, llm.runner.drafter

    def set(self, mode: str, adaptive: bool = True, acceptance: float | None = None) -> None:
        from model_optimizer.runtime.spec_decode.config import SpeculativeConfig
        from model_optimizer.runtime.spec_decode.speculator import Speculator

        core, runner = self.llm.engine.core, self.llm.runner
        max_len = core.info.max_model_len
        runner.verifier.force_acceptance(acceptance)
        runner.drafter = self.drafter if mode == "draft" else None
        if mode == "off":
            core.speculator = None
        elif mode == "ngram":
            # lookup bounds 1-4: the ones the README figures were measured at (the default is now 5-5)
            core.speculator = Speculator(
                SpeculativeConfig("ngram", K, adaptive=adaptive, prompt_lookup_min=1, prompt_lookup_max=4),
                max_model_len=max_len,
            )
        else:
            config = SpeculativeConfig("draft_model", K, model=self.draft, adaptive=adaptive)
            core.speculator = Speculator(config, max_model_len=max_len)


def run(llm, concurrency: int, seed: int, num_requests: int | None = None) -> dict:
    """`num_requests` (default: `concurrency`) requests of OUTPUT_LEN[concurrency] tokens each, at most
    `concurrency` at a time (max_num_seqs is 64: a larger number queues)."""
    from model_optimizer import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN[concurrency], ignore_eos=True, detokenize=False)
    batch = prompts(num_requests or concurrency, seed, llm.runner.vocab_size)
    before, steps = llm.engine.stats(), llm.engine.num_steps
    t0 = time.perf_counter()
    outputs = llm.generate(batch, params)
    seconds = time.perf_counter() - t0
    after = llm.engine.stats()
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    drafts = after.spec_num_drafts - before.spec_num_drafts
    accepted = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens
    proposed = after.spec_num_draft_tokens - before.spec_num_draft_tokens
    policy = llm.engine.core.speculator.policy if llm.engine.core.speculator is not None else None
    return {
        "tokens_per_s": tokens / seconds,
        "requests": len(batch),
        "policy": {str(size): v for size, v in policy.summary().items()} if policy is not None else None,
        "seconds": seconds,
        "output_tokens": tokens,
        "steps": llm.engine.num_steps - steps,
        "verifying_request_steps": drafts,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / proposed if proposed else None,
    }


def measure(modes: Modes, label: str, mode: str, concurrency: int, long: bool = False, **settings) -> dict:
    """One row. A warm-up run of the same shape first (the policy learns there), except for a `long` run:
    LONG_FACTOR x the requests with a fresh policy, so what it costs to learn is part of the figure."""
    modes.set(mode, **settings)
    seed = zlib.crc32(f"{label} {mode} {concurrency} {long} {settings}".encode())
    if not long:
        run(modes.llm, concurrency, seed=seed + 1)  # warm-up: same shape, other prompts
    steps = record_steps(modes.llm) if long and mode != "off" else None
    row = run(modes.llm, concurrency, seed=seed, num_requests=LONG_FACTOR * concurrency if long else None)
    row.update(proposer=label, mode=mode, concurrency=concurrency, long=long, **settings)
    if steps is not None:
        row["per_step"] = steps
    print(
        f"{label:>10} {mode:>5} c={concurrency:<3} {'long ' if long else ''}{settings}: "
        f"{row['tokens_per_s']:8.1f} tok/s, {row['steps']} steps, acceptance length {row['mean_acceptance_length']}",
        flush=True,
    )
    return row


def record_steps(llm) -> list[list]:
    """Every step the engine's policy records from now on, as [running, speculated, steady, ms, tokens]: which
    steps verified and what each cost (a long row's learning, step by step). Lives as long as the speculator."""
    policy, steps = llm.engine.core.speculator.policy, []
    record = policy.record

    def recorded(sample) -> None:
        ms = round(1e3 * sample.seconds, 3)
        steps.append([sample.num_running, sample.speculated, sample.steady, ms, sample.num_tokens])
        record(sample)

    policy.record = recorded
    return steps


def speedups(rows: list[dict]) -> None:
    """Each row's tokens/s over its engine's "off" row at the same concurrency (and length)."""
    base = {(r["engine"], r["concurrency"], r["long"]): r["tokens_per_s"] for r in rows if r["mode"] == "off"}
    for r in rows:
        ref = base.get((r["engine"], r["concurrency"], r["long"]))
        r["speedup"] = r["tokens_per_s"] / ref if ref else None


def bench_engine(engine: str, target: str, draft: str, args: argparse.Namespace) -> tuple[list[dict], dict]:
    t0 = time.perf_counter()
    llm = make_llm(target, draft, util=0.45)  # room for the other engine
    print(f"{engine}: engine ready in {time.perf_counter() - t0:.1f} s", flush=True)
    modes, rows = Modes(llm, draft), []
    proposers = [("draft", "draft")] + ([("ngram", "ngram")] if engine == "draft_small" else [])
    for c in args.concurrencies:
        rows.append(measure(modes, "none", "off", c))
        for label, mode in proposers:
            rows.append(measure(modes, label, mode, c))
            if c >= 64 and not args.quick:
                rows.append(measure(modes, label, mode, c, adaptive=False))
    if 64 in args.concurrencies:  # the policy learning within the run: 3x the requests, fresh
        rows.append(measure(modes, "none", "off", 64, long=True))
        rows += [measure(modes, label, mode, 64, long=True) for label, mode in proposers]
    for label, mode in proposers:  # the mechanism at each acceptance: forced on, whatever it costs
        for a in args.sweep if engine == "draft_small" else (0.0, 0.5, 1.0):
            rows.append(measure(modes, label, mode, 1, acceptance=a, adaptive=False))
    profile = step_profile(modes)
    profile["host"] = host_profile(modes)
    profile["timeline"] = step_timeline(modes)
    if 64 in args.concurrencies:
        profile["timeline_c64"] = batch_step_timeline(modes)
    for r in rows:
        r["engine"] = engine
    return rows, profile


def host_profile(modes: Modes) -> dict:
    """spec_host_overhead.py's figures on this engine at one request: plain, and n-gram at acceptance 1."""
    from spec_host_overhead import profile

    out = {}
    for mode in ("off", "ngram"):
        modes.set(mode, adaptive=False, acceptance=None if mode == "off" else 1.0)
        out[mode] = profile(modes.llm, "plain" if mode == "off" else mode)
        print(f"host profile {mode}: {json.dumps(out[mode])}", flush=True)
    return out


def step_timeline(modes: Modes) -> dict:
    """spec_step_timeline.py's split of a step at one request: plain, and n-gram verifying at acceptance 1."""
    from spec_step_timeline import timeline

    out = {}
    for mode in ("off", "ngram"):
        modes.set(mode, adaptive=False, acceptance=None if mode == "off" else 1.0)
        out[mode] = timeline(modes.llm, verify=mode != "off")
        print(f"step timeline {mode}: {json.dumps(out[mode])}", flush=True)
    return out


def batch_step_timeline(modes: Modes) -> dict:
    """spec_step_timeline.py's per-step record at 64 requests (the short row's shape): n-gram forced on (every
    decode step verifies: are they all graphed?), and with the adaptive policy after its warm-up."""
    from spec_step_timeline import batch_timeline

    from model_optimizer import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN[64], ignore_eos=True, detokenize=False)
    batch = prompts(64, 64, modes.llm.runner.vocab_size)
    out = {}
    for label, adaptive in (("ngram_forced", False), ("ngram_adaptive", True)):
        modes.set("ngram", adaptive=adaptive)
        out[label] = batch_timeline(modes.llm, batch, params)
        policy = modes.llm.engine.core.speculator.policy
        out[label]["policy"] = {str(size): v for size, v in policy.summary().items()}
        brief = {k: v for k, v in out[label].items() if k not in ("per_step", "policy")}
        print(f"step timeline c=64 {label}: {json.dumps(brief)}", flush=True)
    return out


def step_profile(modes: Modes) -> dict:
    """Device time of one step at one request, from CUDA events around the runner's launch (and the drafter's
    proposals inside it): plain decode, then draft + verify at acceptance 1 (forced). Empty off CUDA."""
    import torch

    if not torch.cuda.is_available():
        return {}
    runner, out = modes.llm.runner, {}
    for mode in ("off", "draft", "ngram") if modes.drafter is not None else ("off", "draft"):
        modes.set(mode, adaptive=False, acceptance=None if mode == "off" else 1.0)
        events: dict[str, list] = {"launch": [], "propose": []}
        launch, propose = runner.launch, modes.drafter.propose
        runner.launch = _timed(launch, events["launch"])
        modes.drafter.propose = _timed(propose, events["propose"])
        try:
            run(modes.llm, 1, seed=7)
        finally:
            runner.launch, modes.drafter.propose = launch, propose
        torch.cuda.synchronize()
        out[mode] = {name: _median_ms(pairs) for name, pairs in events.items() if pairs}
    return out


def _timed(fn, pairs: list):
    import torch

    def wrapper(*args, **kwargs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn(*args, **kwargs)
        end.record()
        pairs.append((start, end))
        return result

    return wrapper


def _median_ms(pairs: list) -> float:
    times = sorted(start.elapsed_time(end) for start, end in pairs)
    return times[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default=str(RESULTS / "spec_decode_h200.json"))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 and 64 requests (64: adaptive only, and the long run), acceptance 1 only; no self-draft engine",
    )
    parser.add_argument("--skip-self-draft", action="store_true", help="leave out the 8B-as-its-own-draft engine")
    parser.add_argument("--target", default=str(CONFIGS / "llama-3.1-8b"), help="target config folder (dummy weights)")
    parser.add_argument("--draft", default=str(CONFIGS / "llama-3.2-1b"), help="small draft config folder")
    args = parser.parse_args()
    args.concurrencies = concurrencies = [1, 64] if args.quick else [1, 8, 64]
    args.sweep = sweep = (1.0,) if args.quick else SWEEP
    payload: dict = {
        "benchmark": "spec_decode",
        "environment": environment(),
        "config": {
            "target": args.target,
            "draft": args.draft,
            "weights": "dummy bf16",
            "num_speculative_tokens": K,
            "prompt_len": PROMPT_LEN,
            "output_len": OUTPUT_LEN,
            "concurrencies": concurrencies,
            "long_run_requests": LONG_FACTOR * 64,
            "sweep": list(sweep),
        },
        "rows": [],
        "step_profile_ms": {},
    }
    self_draft = not (args.skip_self_draft or args.quick)
    engines = [("draft_small", args.draft)] + ([("self_draft", args.target)] if self_draft else [])
    for engine, draft in engines:
        rows, profile = bench_engine(engine, args.target, draft, args)
        payload["rows"] += rows
        payload["step_profile_ms"][engine] = profile
        speedups(payload["rows"])
        print(f"saved {write_json(args.output, payload)}", flush=True)  # after each engine: a timeout keeps these


if __name__ == "__main__":
    main()
