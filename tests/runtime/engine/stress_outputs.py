"""What a stress workload's outputs must be (stress_harness.py runs it): each request's outputs, put together
whatever their kind, against the same request alone on a roomy, plain engine (synchronous steps, one whole
prefill, no prefix cache, no preemption, CUMULATIVE outputs): the same tokens, text, finish and stop reason,
and logprobs equal up to float summation order. An aborted request's may stop early: a beginning of those.

Batches differ in float summation order (chunks, batch sizes), so a token the sampler finds tied to ~1e-6
may go either way: such a mismatch is a `near_tie`, told apart by recomputing both tokens' scores alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.layers.sampler import _row_seed
from model_optimizer.runtime.sampling_params import RequestOutputKind

from .stress_workloads import Arrival

LOGPROB_TOL = 1e-4
"""Logprobs of the same position in different batches agree to about 1e-6 in float32."""
TIE_TOL = 1e-4
"""Two tokens whose logprobs (greedy) or race values (seeded) differ by less are tied up to float rounding."""


@dataclass
class Finding:
    kind: str
    """tokens, finish, logprobs, prompt_logprobs, outputs, near_tie (no failure), invariant, end_state, hang
    or error."""
    request_id: str | None
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.request_id or '-'}: {self.detail}"


def sampling_params(params: dict) -> SamplingParams:
    """An arrival's SamplingParams (its output_kind given by value)."""
    kind = params.get("output_kind")
    return SamplingParams(**(params | {"output_kind": RequestOutputKind(kind)} if kind else params))


@dataclass
class Completion:
    index: int
    token_ids: list
    text: str = ""
    logprobs: list | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class Collected:
    """A request's outputs put together: the last of CUMULATIVE and FINAL_ONLY ones, DELTA ones joined."""

    outputs: list[Completion]
    delta: bool
    prompt_logprobs: list | None = None
    finished: bool = False

    @classmethod
    def of(cls, arrival: Arrival) -> Collected:
        n = arrival.params.get("n", 1)
        return cls([Completion(i, []) for i in range(n)], arrival.params.get("output_kind") == "delta")

    def add(self, output) -> list[str]:  # noqa: ANN001 - a RequestOutput
        """Take one more output; what is wrong with it (news after the request or a completion finished)."""
        problems = ["an output after the request's last"] if self.finished else []
        self.finished = output.finished
        for c in output.outputs:
            done = self.outputs[c.index]
            if self.delta and done.finish_reason is not None:
                problems.append(f"completion {c.index}: a delta after its finish")
            logprobs = list(c.logprobs) if c.logprobs is not None else None
            if self.delta:
                done.token_ids, done.text = done.token_ids + list(c.token_ids), done.text + c.text
                done.logprobs = None if logprobs is None else (done.logprobs or []) + logprobs
            else:
                done.token_ids, done.text, done.logprobs = list(c.token_ids), c.text, logprobs
            done.finish_reason, done.stop_reason = c.finish_reason, c.stop_reason
        if output.prompt_logprobs is not None:
            given = list(output.prompt_logprobs)
            self.prompt_logprobs = (self.prompt_logprobs or []) + given if self.delta else given
        return problems


class Reference:
    """Each request alone on a roomy, plain engine; outputs cached by prompt and params."""

    def __init__(self, model_dir: str) -> None:
        self.llm = LLM(
            model_dir,
            dtype="float32",
            max_model_len=512,
            kv_cache_memory=1 << 26,
            enable_prefix_caching=False,
            async_scheduling=False,
            max_decode_stall=0,
        )
        self._outputs: dict[tuple, object] = {}

    def output(self, arrival: Arrival, max_model_len: int):  # noqa: ANN201 - a RequestOutput
        """`arrival` alone, its last CUMULATIVE output; max_tokens None runs to the end of the workload's
        context, `max_model_len`."""
        params = {k: v for k, v in arrival.params.items() if k != "output_kind"}
        if params["max_tokens"] is None:
            params["max_tokens"] = max_model_len - len(arrival.prompt)
        key = (tuple(arrival.prompt), repr(sorted(params.items())))
        if key not in self._outputs:
            self._outputs[key] = self.llm.generate([arrival.prompt], SamplingParams(**params), use_tqdm=False)[0]
        return self._outputs[key]

    def logprob_at(self, context: list[int], token_id: int) -> float:
        """The plain engine's logprob of `token_id` after `context` (a prompt logprob)."""
        params = SamplingParams(max_tokens=1, prompt_logprobs=0)
        output = self.llm.generate([context + [token_id]], params, use_tqdm=False)[0]
        return output.prompt_logprobs[-1][token_id].logprob

    def near_tie(self, arrival: Arrival, index: int, got: list[int], expected: list[int]) -> bool:
        """Whether two completions part at a token the sampler found tied to float rounding. Greedy: the two
        tokens' logprobs; seeded: their values in the sampler's exponential race (layers/sampler.py), under
        the noise of that (seed, position)."""
        params = sampling_params(arrival.params).for_completion(index)
        at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
        if at is None or params.repetition_penalty != 1.0:
            return False
        context = arrival.prompt + expected[:at]
        a, b = self.logprob_at(context, got[at]), self.logprob_at(context, expected[at])
        if params.greedy:
            return abs(a - b) < TIE_TOL
        generator = torch.Generator().manual_seed(_row_seed(params.seed, at))  # type: ignore[arg-type]
        noise = torch.empty(self.llm.engine.info.vocab_size).exponential_(generator=generator)
        race = [lp / params.temperature - math.log(noise[t].item()) for lp, t in ((a, got[at]), (b, expected[at]))]
        return abs(race[0] - race[1]) < TIE_TOL


def compare(arrival: Arrival, got: Collected, expected, aborted: bool) -> list[Finding]:  # noqa: ANN001
    """Collected outputs against the reference's RequestOutput; an aborted request's may stop early."""
    rid, findings = arrival.request_id, []
    for a, b in zip(got.outputs, expected.outputs):
        cut = aborted and a.finish_reason == "abort"
        tokens = b.token_ids[: len(a.token_ids)] if cut else b.token_ids
        if a.token_ids != tokens:
            findings.append(Finding("tokens", rid, f"completion {a.index}: {a.token_ids} != {b.token_ids}"))
            continue
        if not cut and (a.finish_reason, a.stop_reason, a.text) != (b.finish_reason, b.stop_reason, b.text):
            detail = f"{(a.finish_reason, a.stop_reason, a.text)!r} != {(b.finish_reason, b.stop_reason, b.text)!r}"
            findings.append(Finding("finish", rid, f"completion {a.index}: {detail}"))
        if (a.logprobs is None) != (b.logprobs is None):
            findings.append(Finding("logprobs", rid, f"completion {a.index}: logprobs {a.logprobs is not None}"))
        elif a.logprobs is not None:
            expected_logprobs = list(b.logprobs)[: len(a.logprobs)] if cut else list(b.logprobs)
            problems = logprob_problems(a.logprobs, expected_logprobs, arrival.params.get("logprobs"))
            findings += [Finding("logprobs", rid, f"completion {a.index}: {p}") for p in problems]
    expected_prompt = expected.prompt_logprobs
    if aborted and got.prompt_logprobs is not None and expected_prompt is not None:
        expected_prompt = expected_prompt[: len(got.prompt_logprobs)]  # it may stop before its prompt is through
    if not aborted or got.prompt_logprobs is not None:
        problems = prompt_logprob_problems(got.prompt_logprobs, expected_prompt)
        findings += [Finding("prompt_logprobs", rid, p) for p in problems]
    return findings


def logprob_problems(got: list, expected: list, k: int | None) -> list[str]:
    """Sampled logprobs: the same tokens, their logprobs close, the top k the same ids up to near-ties."""
    if len(got) != len(expected):
        return [f"{len(got)} logprobs, expected {len(expected)}"]
    problems = []
    for i, (a, b) in enumerate(zip(got, expected)):
        if a.token_id != b.token_id or abs(a.logprob - b.logprob) > LOGPROB_TOL:
            problems.append(f"position {i}: ({a.token_id}, {a.logprob}) != ({b.token_id}, {b.logprob})")
        problems += [f"position {i}: {p}" for p in _top_problems(a.top, dict(list(b.top.items())[:k]))]
    return problems[:5]


def _top_problems(got: dict[int, float], expected: dict[int, float]) -> list[str]:
    """Two top-k dicts: equal values where both have an id; an id in one alone must sit at a near-tie."""
    if len(got) != len(expected):
        return [f"top of {len(got)} ids, expected {len(expected)}"]
    problems = []
    floor = min(expected.values(), default=0.0)
    for token_id in got.keys() | expected.keys():
        a, b = got.get(token_id), expected.get(token_id)
        if a is not None and b is not None and abs(a - b) > LOGPROB_TOL:
            problems.append(f"top id {token_id}: {a} != {b}")
        elif (a is None or b is None) and abs((a if b is None else b) - floor) > LOGPROB_TOL:
            problems.append(f"top id {token_id} only on one side ({a}, {b})")
    return problems


def prompt_logprob_problems(got: list | None, expected: list | None) -> list[str]:
    """Prompt logprobs ({id: Logprob} per position, None first): as the sampled ones."""
    if got is None or expected is None:
        return [] if got is expected else [f"prompt logprobs given: {got is not None}, expected {expected is not None}"]
    if len(got) != len(expected):
        return [f"{len(got)} prompt logprobs, expected {len(expected)}"]
    problems = []
    for i, (a, b) in enumerate(zip(got, expected)):
        if a is None or b is None:
            if a is not b:
                problems.append(f"prompt position {i}: {a} vs {b}")
            continue
        values_a = {t: lp.logprob for t, lp in a.items()}
        values_b = {t: lp.logprob for t, lp in b.items()}
        problems += [f"prompt position {i}: {p}" for p in _top_problems(values_a, values_b)]
    return problems[:5]
