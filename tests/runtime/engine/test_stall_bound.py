"""Running streams keep their pace while a long prompt arrives: the engine times its steps and caps the
prefill tokens of each, so no step takes more than max_decode_stall times a decode-only step.

Step times come from a clock the test drives (each launched step costs a fixed part plus a part per
token), so the bound is checked exactly, on any machine; the model and the engine are the real ones."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.stall_bound import DecodeStallBound

FIXED_S, PER_TOKEN_S = 0.010, 0.0001
DECODE = SamplingParams(max_tokens=200, ignore_eos=True, temperature=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.steps: list[tuple[float, int, int]] = []
        """(seconds, tokens, prefill tokens) per launched step."""

    def __call__(self) -> float:
        return self.now


def timed_llm(model_dir: str, stall: float | None) -> tuple[LLM, Clock]:
    llm = LLM(model_dir, max_model_len=512, num_kv_blocks=512, max_decode_stall=stall)
    core, clock = llm.engine.core, Clock()
    launch = core.runner.launch

    def timed_launch(scheduler_output, pending):
        tokens = scheduler_output.total_num_scheduled_tokens
        prefill = sum(n for n in scheduler_output.num_scheduled_tokens.values() if n > 1)
        seconds = FIXED_S + PER_TOKEN_S * tokens
        clock.now += seconds
        clock.steps.append((seconds, tokens, prefill))
        return launch(scheduler_output, pending)

    core.runner.launch = timed_launch
    core.clock = clock
    return llm, clock


def run(llm: LLM, clock: Clock) -> dict:
    """Two streams decode; then a 480-token prompt arrives. Returns each request's token count per step."""
    engine = llm.engine
    engine.add_request("a", [5, 6, 7, 8], DECODE)
    engine.add_request("b", [9, 10, 11], DECODE)
    for _ in range(6):  # both decode alone for a while
        engine.step()
    first_long_step = len(clock.steps)
    engine.add_request("long", [(7 * i) % 400 + 3 for i in range(480)], SamplingParams(max_tokens=1, temperature=0))
    counts: dict[str, list[int]] = {"a": [], "b": [], "long": []}
    while engine.output_processor.has("long"):
        outputs = {o.request_id: o for o in engine.step()}
        for rid in counts:
            counts[rid].append(len(outputs[rid].outputs[0].token_ids) if rid in outputs else -1)
    return {"counts": counts, "first_long_step": first_long_step}  # type: ignore[dict-item]


def test_no_step_takes_more_than_twice_a_decode_step_while_streams_run(tiny_model):
    llm, clock = timed_llm(str(tiny_model("qwen3")), 2.0)
    result = run(llm, clock)
    decode_only = FIXED_S + PER_TOKEN_S * 2
    steps = clock.steps[result["first_long_step"] :]
    prefilling = [s for s in steps if s[2] > 0]
    assert len(prefilling) >= 3  # the prompt came in chunks
    assert all(seconds <= 2.0 * decode_only + 1e-12 for seconds, _, _ in steps)
    assert sum(p for _, _, p in prefilling) >= 480  # and all of it was computed
    # every step in between still gave each stream its token (its output grew every step)
    for rid in ("a", "b"):
        assert all(count >= 0 for count in result["counts"][rid][:-1])


def test_off_the_long_prompt_takes_one_big_step(tiny_model):
    llm, clock = timed_llm(str(tiny_model("qwen3")), 0)
    result = run(llm, clock)
    steps = clock.steps[result["first_long_step"] :]
    assert max(seconds for seconds, _, _ in steps) > 3 * (FIXED_S + PER_TOKEN_S * 2)  # the stall this bound removes


def test_the_bound_learns_both_costs_then_caps():
    bound = DecodeStallBound(2.0, min_tokens=16)
    assert bound.max_prefill_tokens() == bound.probe_tokens  # nothing timed yet
    bound.observe(0.012, 0)
    bound.observe(0.012 + 64 * 0.0001, 64)
    assert bound.max_prefill_tokens() == pytest.approx(120, abs=1)
    slow = DecodeStallBound(2.0, min_tokens=16)
    slow.observe(0.001, 0)
    slow.observe(0.001 + 64 * 0.01, 64)
    assert slow.max_prefill_tokens() == 16  # a prompt always progresses
    with pytest.raises(ValueError, match="above 1"):
        DecodeStallBound(1.0)
