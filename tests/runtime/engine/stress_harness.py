"""Run a stress workload (stress_workloads.py) on a real engine, step by step, and say how it went wrong.

Requests are added when their step comes (between steps) and aborted when their rule says; after every step
the engine's bookkeeping is checked (stress_checks.py), and after the run each request's outputs are compared
with the same request alone on a roomy, plain engine (stress_outputs.py). The engine core's clock, which the
decode-stall bound reads, is a seeded fake: a workload runs the same way every time.
"""

from __future__ import annotations

import random
import traceback
from collections import Counter

from model_optimizer import LLM

from .stress_checks import end_problems, kv_problems, schedule_problems
from .stress_outputs import Collected, Finding, Reference, compare, sampling_params
from .stress_workloads import Arrival, Workload

__all__ = ["Finding", "Reference", "run_workload"]

MAX_STEPS = 5000
"""Steps after which a run counts as hung (the largest workloads finish in a few hundred)."""


class _Run:
    """One workload on one engine: arrivals, aborts, outputs, checks."""

    def __init__(self, model_dir: str, workload: Workload) -> None:
        self.workload = workload
        self.engine = LLM(model_dir, **workload.settings).engine
        self.core = self.engine.core
        clock_rng, now = random.Random(workload.clock_seed), [0.0]

        def clock() -> float:  # the decode-stall bound's timings, made up but the same every run
            now[0] += clock_rng.uniform(0.001, 0.01)
            return now[0]

        self.core.clock = clock
        self.schedule_problems: list[str] = []
        scheduler, schedule = self.core.scheduler, self.core.scheduler.schedule

        def checked_schedule(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = schedule(*args, **kwargs)
            self.schedule_problems += schedule_problems(scheduler, out)
            self.num_partial_prefills += sum(
                r.num_computed_tokens < r.num_prompt_tokens
                for r in map(scheduler.requests.get, out.num_scheduled_tokens)
            )
            return out

        scheduler.schedule = checked_schedule
        self.collected: dict[str, Collected] = {}
        self.aborted: set[str] = set()
        self.children: dict[str, list] = {}
        self.arrived: dict[str, int] = {}
        self.findings: list[Finding] = []
        self.num_steps = 0
        self.num_partial_prefills = 0
        """Prompt chunks scheduled that leave part of their prompt for later steps."""

    def run(self) -> list[Finding]:
        waiting = sorted(self.workload.arrivals, key=lambda a: a.step)
        live: list[Arrival] = []
        while waiting or self.engine.has_unfinished_requests():
            if not self.engine.has_unfinished_requests():
                self.num_steps = max(self.num_steps, waiting[0].step)  # idle: the next arrival comes now
            while waiting and waiting[0].step <= self.num_steps:
                live.append(waiting.pop(0))
                self._add(live[-1])
            for arrival in [a for a in live if self._abort_due(a)]:
                self.aborted.add(arrival.request_id)
                self._take(arrival.request_id, self.engine.abort(arrival.request_id))
            if self._check("invariant", kv_problems(self.core)):
                return self.findings
            for output in self.engine.step():
                self._take(output.request_id, output)
            self.num_steps += 1
            live = [a for a in live if not self.collected[a.request_id].finished]
            if self._check("invariant", kv_problems(self.core) + self.schedule_problems):
                return self.findings
            if self.num_steps > MAX_STEPS:
                self.findings.append(Finding("hang", None, f"unfinished after {MAX_STEPS} steps"))
                return self.findings
        children = [c for group in self.children.values() for c in group]
        self._check("end_state", end_problems(self.core, children))
        return self.findings

    def coverage(self) -> Counter:
        """What this run exercised, to tell a quiet search from one that tried nothing."""
        stats = self.engine.stats()
        counts = Counter(
            runs=1,
            steps=self.num_steps,
            preemptions=stats.num_preemptions,
            swapped_out_blocks=stats.num_swapped_out_blocks,
            prefix_hit_tokens=stats.prefix_cache_hits,
            host_hit_tokens=stats.host_kv_hits,
            spec_accepted_tokens=stats.spec_num_accepted_tokens,
            partial_prefills=self.num_partial_prefills,
        )
        for arrival in self.workload.arrivals:
            if arrival.request_id in self.aborted:
                counts[f"aborted_{arrival.abort[0]}"] += 1  # type: ignore[index]
        counts["runs_with_preemption"] = stats.num_preemptions > 0
        return counts

    def _add(self, arrival: Arrival) -> None:
        params = sampling_params(arrival.params)
        rid = arrival.request_id
        self.engine.add_request(rid, arrival.prompt, params, priority=arrival.priority, stream=arrival.stream)
        self.collected[rid] = Collected.of(arrival)
        self.children[rid] = list(self.core.groups[rid])
        self.arrived[rid] = self.num_steps

    def _take(self, request_id: str, output) -> None:  # noqa: ANN001 - a RequestOutput or None
        if output is None:
            self.findings.append(Finding("outputs", request_id, f"no output (step {self.num_steps})"))
            return
        problems = self.collected[request_id].add(output)
        self.findings += [Finding("outputs", request_id, f"step {self.num_steps}: {p}") for p in problems]

    def _abort_due(self, arrival: Arrival) -> bool:
        if arrival.abort is None:
            return False
        kind, k = arrival.abort
        children = self.children[arrival.request_id]
        if kind == "step":
            return self.num_steps - self.arrived[arrival.request_id] >= k
        if kind == "prefill":
            return any(
                c.status.value == "running" and 0 < c.num_computed_tokens < c.num_prompt_tokens for c in children
            )
        if kind == "preempted":
            return any(c.status.value == "preempted" for c in children)
        return any(c.num_output_tokens >= k for c in children)

    def _check(self, kind: str, problems: list[str]) -> bool:
        if problems:
            self.findings.append(Finding(kind, None, f"after step {self.num_steps}: " + "; ".join(problems[:5])))
        return bool(problems)


def run_workload(
    model_dir: str, workload: Workload, reference: Reference, coverage: Counter | None = None
) -> list[Finding]:
    """Everything that went wrong running `workload`: exceptions, bookkeeping and outputs; [] if nothing.
    `coverage`, when given, counts what the run exercised (preemptions, swaps, cache hits, aborts)."""
    try:
        run = _Run(model_dir, workload)
        findings = run.run()
    except Exception:  # noqa: BLE001 - a crash is a finding like any other
        return [Finding("error", None, traceback.format_exc(limit=8))]
    if coverage is not None:
        coverage.update(run.coverage())
    if any(f.kind != "outputs" for f in findings):
        return findings
    max_model_len = workload.settings["max_model_len"]
    for arrival in workload.arrivals:
        got = run.collected[arrival.request_id]
        if not got.finished:
            findings.append(Finding("outputs", arrival.request_id, "no finished output"))
            continue
        expected = reference.output(arrival, max_model_len)
        for finding in compare(arrival, got, expected, arrival.request_id in run.aborted):
            if finding.kind == "tokens":
                index = int(finding.detail.split(":")[0].split()[-1])
                got_ids, expected_ids = got.outputs[index].token_ids, expected.outputs[index].token_ids
                if reference.near_tie(arrival, index, got_ids, expected_ids):
                    finding.kind = "near_tie"
            findings.append(finding)
    return findings
