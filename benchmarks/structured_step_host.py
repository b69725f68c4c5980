"""Structured outputs: the step loop's host time per phase, 64 constrained rows against 64 unconstrained (CPU).

    OMP_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/structured_step_host.py [--rows 64] [--tokens 128]
        [--full] [--schema order|order-unbounded] [--advance pool|turn|both] [--label NAME] [--output FILE]

A tiny Qwen3 (2 layers, hidden 64, dummy weights) with the vocabulary and the 151k-token byte-level
BPE tokenizer of benchmarks/configs/qwen3-0.6b (bpe_tokenizer_model.py, ~30 s): the model's forward
costs little here, so what is timed is the engine's host work, the part that sits on the step loop
(the thread that schedules, launches and collects) whatever the device. `--rows` requests generate
`--tokens` tokens each (greedy), once unconstrained (ignore_eos) and once with the order schema of
benchmarks/structured.py (`--schema order-unbounded`: without its maxLength bounds). `--advance both`
adds a constrained run whose matchers take their tokens in turn on the loop thread rather than on
llguidance's pool (`constrained_in_turn`), the kinds alternating over `--repeats`. Every call of the
engine core's phases is timed on the loop thread, in wall and in thread CPU time (the fill's pool runs
in other threads and is not counted, except where the loop waits for it):

    schedule        Scheduler.schedule
    prepare         runner.prepare (the batch updated, the step's inputs written: launch's host half)
    launch          runner.submit (the forward; for masked steps without its sampling)
    collect         runner.collect (the previous step's tokens to the host)
    update          Scheduler.update_from_output
    masked_rows     ConstrainedDecoding.masked_rows (which rows need masks)
    advance         ConstrainedDecoding.take (the new tokens into the matchers)
    fill_start      ConstrainedDecoding.fill (the rows and buffers; the fill's start)
    mask_wait       ConstrainedDecoding.wait (the loop waiting for the masks)
    sample          runner.sample (the masks to the device and the masked sampling)
    other           the rest of EngineCore.step (the rows, bookkeeping) and LLMEngine.step's outputs

Beside the loop thread's phases, `mask_chain_ms` holds what lies between one step's tokens and the
next step's sampling, the chain no forward hides: `lead`, from `collect` returning to the fill running
in its thread (the grammars taking the tokens, the rows and buffers), and `fill_thread`, the masks'
computing there. Only steps that decode exactly `--rows` rows count (no prefill, no request finished
yet). With `--full` (Qwen3-0.6B's own sizes, bf16; scripts/device/structured_h200.sh) on a GPU, the
step's total is its real length, unconstrained and constrained, and launch/collect/sample are the
device's queueing and waiting; without, on a CPU, the forward and sampling run on the host and only
the other phases say anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from common import CONFIGS, RESULTS, environment, write_json
from structured import SCHEMAS

IN_TURN = 1 << 30
"""PARALLEL_ADVANCE_ROWS for a run whose matchers take their tokens in turn, whatever the rows."""
PHASES = (
    "schedule",
    "prepare",
    "launch",
    "collect",
    "update",
    "masked_rows",
    "advance",
    "fill_start",
    "mask_wait",
    "sample",
)
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY |= {"num_key_value_heads": 1, "head_dim": 32, "torch_dtype": "float32"}


def make_model(tmp: Path, full: bool = False) -> Path:
    from bpe_tokenizer_model import write

    src = tmp / "config"
    src.mkdir()
    config = json.loads((CONFIGS / "qwen3-0.6b" / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(config if full else config | TINY))
    write(src, tmp / "model")
    return tmp / "model"


class Timers:
    """Wall and loop-thread CPU seconds per phase, per engine step."""

    def __init__(self) -> None:
        self.current: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.steps: list[tuple[dict, dict]] = []
        self.decode_rows = -1
        self.stamps: dict[str, float] = {}
        """Phase -> when its last call ended (the lead: tokens on the host -> the fill running)."""

    def wrap(self, owner: object, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                end = time.perf_counter()
                cell = self.current[phase]
                cell[0] += end - wall
                cell[1] += time.thread_time() - cpu
                self.stamps[phase] = end

        setattr(owner, name, timed)


def run(llm, rows: int, tokens: int, constrained: bool, seed: int, schema: dict) -> dict:  # noqa: ANN001
    from model_optimizer import SamplingParams
    from model_optimizer.runtime.structured import StructuredOutputs

    engine, core = llm.engine, llm.engine.core
    timers = Timers()
    scheduler = core.scheduler
    schedule = scheduler.schedule

    def counted_schedule(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = schedule(*args, **kwargs)
        decode = out.num_prompt_tokens == 0 and len(out.num_scheduled_tokens) == rows
        timers.decode_rows = rows if decode else -1
        return out

    scheduler.schedule = counted_schedule
    timers.wrap(scheduler, "schedule", "schedule")
    timers.wrap(scheduler, "update_from_output", "update")
    for name, phase in (("prepare", "prepare"), ("submit", "launch"), ("collect", "collect"), ("sample", "sample")):
        timers.wrap(core.runner, name, phase)
    if constrained:
        c = core._constrained()
        for name, phase in (("masked_rows", "masked_rows"), ("take", "advance"), ("fill", "fill_start")):
            timers.wrap(c, name, phase)
        timers.wrap(c, "wait", "mask_wait")
        timers.wrap(c, "_start", "fill_running")
    so = StructuredOutputs.json(schema) if constrained else None
    params = [
        SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=not constrained, structured_outputs=so)
        for i in range(rows)
    ]
    for i, p in enumerate(params):
        engine.add_request(f"{'c' if constrained else 'u'}{seed}-{i}", f"Order number {i + seed}:", p)
    outputs: dict[str, list[int]] = {}
    manager = core.constrained.manager if constrained else None
    while engine.has_unfinished_requests():
        timers.current.clear()
        timers.stamps.clear()
        computed = manager.fill_seconds if manager is not None else 0.0
        wall, cpu = time.perf_counter(), time.thread_time()
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = list(out.outputs[0].token_ids)
        total = (time.perf_counter() - wall, time.thread_time() - cpu)
        if timers.decode_rows == rows and not outputs:
            step = {p: tuple(timers.current.get(p, (0.0, 0.0))) for p in PHASES}
            stamps = timers.stamps
            lead = stamps["fill_running"] - stamps["collect"] if "fill_running" in stamps else 0.0
            step["lead"] = (lead, 0.0)
            step["fill_thread"] = ((manager.fill_seconds - computed) if manager is not None else 0.0, 0.0)
            timers.steps.append((step, total))
    for c in (scheduler, core.runner) + ((core.constrained,) if constrained else ()):
        for name in list(vars(c)):
            if name in (
                "schedule",
                "update_from_output",
                "prepare",
                "submit",
                "collect",
                "sample",
                "masked_rows",
                "take",
                "fill",
                "wait",
                "_start",
            ):
                delattr(c, name)
    return summarise(timers.steps, outputs, llm.tokenizer if constrained else None, schema)


def summarise(steps: list, outputs: dict, tokenizer, schema: dict) -> dict:  # noqa: ANN001
    def ms(values: list[float]) -> float:
        return round(1000 * float(np.mean(values)), 4) if values else 0.0

    result = {"steps": len(steps), "wall_ms": {}, "cpu_ms": {}}
    for k, key in ((0, "wall_ms"), (1, "cpu_ms")):
        for phase in PHASES:
            result[key][phase] = ms([s[phase][k] for s, _ in steps])
        result[key]["other"] = ms([t[k] - sum(s[p][k] for p in PHASES) for s, t in steps])
        result[key]["total"] = ms([t[k] for _, t in steps])
    result["mask_chain_ms"] = {}  # not on the loop thread's clock: not part of total
    for part in ("lead", "fill_thread"):
        values = [s[part][0] for s, _ in steps]
        result["mask_chain_ms"][part] = ms(values)
        result["mask_chain_ms"][f"{part}_p50"] = round(1000 * float(np.median(values)), 4) if values else 0.0
    result["total_ms_p50"] = round(1000 * float(np.median([t[0] for _, t in steps])), 4) if steps else 0.0
    result["checksum"] = hash(tuple(tuple(v) for _, v in sorted(outputs.items()))) & ((1 << 61) - 1)
    if tokenizer is not None:
        import jsonschema

        valid = 0
        for tokens in outputs.values():
            try:
                jsonschema.validate(json.loads(tokenizer.decode(tokens, skip_special_tokens=True)), schema)
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                continue
        result["documents"] = {"finished": len(outputs), "valid": valid}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each kind (the first also warms up)")
    parser.add_argument(
        "--label", default="now", help="the key of this run's figures in the output (kept beside others)"
    )
    parser.add_argument("--output", default=str(RESULTS / "structured_step_host_cpu.json"))
    parser.add_argument("--schema", choices=sorted(SCHEMAS), default="order", help="order-unbounded: no maxLength")
    parser.add_argument(
        "--full",
        action="store_true",
        help="Qwen3-0.6B's own sizes (bf16, dummy weights): the GPU run, not the tiny one",
    )
    parser.add_argument(
        "--advance",
        choices=("pool", "turn", "both"),
        default="pool",
        help="how the matchers take a step's tokens: llguidance's pool (the engine's way from "
        "PARALLEL_ADVANCE_ROWS rows), in turn on the loop thread, or both, alternating (`constrained_in_turn`)",
    )
    args = parser.parse_args()
    from model_optimizer.runtime.structured import manager

    schema = SCHEMAS[args.schema]
    pool_from = manager.PARALLEL_ADVANCE_ROWS
    from model_optimizer import LLM

    output = Path(args.output)
    payload = json.loads(output.read_text()) if output.exists() else {}
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    payload |= {"benchmark": "structured_step_host", "device": device, "environment": environment()}
    payload.setdefault("runs", {})
    with tempfile.TemporaryDirectory(prefix="mopt-structured-step-") as tmp:
        model_dir = make_model(Path(tmp), args.full)
        extra = {"dtype": "bfloat16"} if args.full else {}
        llm = LLM(str(model_dir), load_format="dummy", max_model_len=512, max_num_seqs=args.rows, **extra)
        figures = {}
        kinds = {"pool": ["constrained"], "turn": ["constrained_in_turn"]}.get(args.advance)
        kinds = ["unconstrained"] + (kinds or ["constrained", "constrained_in_turn"])
        for repeat in range(args.repeats):  # the kinds alternate: the host's drift falls on each alike
            for kind in kinds:
                manager.PARALLEL_ADVANCE_ROWS = IN_TURN if kind == "constrained_in_turn" else pool_from
                figures[kind] = run(llm, args.rows, args.tokens, kind != "unconstrained", 1000 * repeat, schema)
                print(f"{kind} #{repeat}: {figures[kind]}", file=sys.stderr)
        manager.PARALLEL_ADVANCE_ROWS = pool_from
        llm.close()
    threads = os.environ.get("MOPT_GRAMMAR_THREADS", "default")
    payload["runs"][args.label] = {"rows": args.rows, "tokens": args.tokens, "full": args.full, "schema": args.schema}
    payload["runs"][args.label] |= {"grammar_threads": threads, **figures}
    plain = figures["unconstrained"]["wall_ms"]["total"]
    for kind in kinds[1:]:
        masked = figures[kind]["wall_ms"]["total"]
        print(
            f"step wall, {kind}: {plain} -> {masked} ms ({round(masked / plain, 3) if plain else None}x)",
            file=sys.stderr,
        )
    write_json(output, payload)
    print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
