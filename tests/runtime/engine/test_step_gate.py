"""AsyncEngine's StepGate on the real tiny Qwen3: a held loop runs no step but still adds, aborts
and stops; steps are let through one at a time; nothing about it depends on the machine's speed."""

from __future__ import annotations

import asyncio

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.async_engine import FAULT_ENV, HOLD_ENV, AsyncEngine, EngineDeadError
from tests.async_run import blocking, run

LONG = SamplingParams(max_tokens=100, ignore_eos=True, temperature=0.0)
WAIT = 30.0  # seconds; only a bound on a hang, never reached when things work


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=4)


def test_open_gate_changes_nothing(llm):
    async def body(engine: AsyncEngine):
        outputs = [o async for o in engine.generate("a", [1, 2, 3], SamplingParams(max_tokens=5, ignore_eos=True))]
        assert outputs[-1].finished and len(outputs[-1].outputs[0].token_ids) == 5
        assert await blocking(engine.gate.wait_parked, WAIT)  # open and idle counts as parked
        return engine.gate.num_steps

    assert run(llm, body) >= 5


def test_held_gate_adds_but_runs_no_step_then_steps_one_at_a_time(llm):
    async def body(engine: AsyncEngine):
        gate = engine.gate
        with gate.held():
            assert await blocking(gate.wait_parked, WAIT)
            steps = gate.num_steps
            stream = await engine.add_request("r", [5, 6, 7, 8], LONG)  # accepted while held
            assert await blocking(gate.wait_parked, WAIT)
            assert gate.num_steps == steps and engine.stats.num_waiting == 1
            assert engine.stats.num_generation_tokens == llm.engine.num_generation_tokens
            tokens = engine.stats.num_generation_tokens
            assert await blocking(gate.step, 3, WAIT) == 3  # exactly the steps granted
            assert gate.num_steps == steps + 3 and engine.stats.num_running == 1
            got = engine.stats.num_generation_tokens - tokens
            assert 1 <= got <= 3  # outputs may trail launches by one step (asynchronous scheduling)
            assert await blocking(gate.run_until, lambda: engine.stats.num_generation_tokens >= tokens + 5, WAIT)
            assert engine.stats.num_generation_tokens == tokens + 5  # one token a step: it stopped right there
            stream.abort()
            assert await blocking(gate.wait_parked, WAIT)  # the abort is applied while held
            assert engine.stats.num_running == 0 and engine.stats.num_free_blocks == engine.stats.num_blocks
            assert engine.num_in_flight == 0
            assert await blocking(gate.step, 2, WAIT) == 0  # nothing left to run: the grant is withdrawn
            assert await blocking(gate.run_until, lambda: False, WAIT) is False
        # released: a new request runs to its end without help
        outputs = [o async for o in engine.generate("s", [9, 10], SamplingParams(max_tokens=4, ignore_eos=True))]
        assert outputs[-1].finished and not gate.is_held

    run(llm, body)


def test_release_lets_a_held_request_finish(llm):
    async def body(engine: AsyncEngine):
        gate = engine.gate
        gate.hold()
        stream = await engine.add_request("r", [5, 6, 7], SamplingParams(max_tokens=6, ignore_eos=True))
        assert await blocking(gate.wait_parked, WAIT) and engine.stats.num_waiting == 1
        gate.release()
        outputs = [o async for o in stream]
        assert outputs[-1].finished and outputs[-1].outputs[0].finish_reason == "length"

    run(llm, body)


def test_abort_all_and_stop_work_while_held(llm):
    async def body(engine: AsyncEngine):
        gate = engine.gate
        gate.hold()
        streams = [await engine.add_request(f"r{i}", [5, 6, 7, i + 10], LONG) for i in range(3)]
        assert await blocking(gate.run_until, lambda: engine.stats.num_running == 3, WAIT)
        engine.abort_all()
        finals = []
        for stream in streams:
            finals.append([o async for o in stream][-1])
        assert all(f.finished and f.outputs[0].finish_reason == "abort" for f in finals)
        assert await blocking(gate.wait_parked, WAIT)
        assert engine.stats.num_free_blocks == engine.stats.num_blocks
        late = await engine.add_request("late", [5, 6], LONG)
        await blocking(engine.stop)  # still held, one request waiting: stop must not hang
        assert not engine.client._thread.is_alive()
        final = [o async for o in late][-1]
        assert final.finished and final.outputs[0].finish_reason == "abort"
        assert await blocking(gate.wait_parked, 0.0) is False  # the loop has ended: nobody waits forever
        assert await blocking(gate.step, 1, WAIT) == 0

    run(llm, body)


def test_engine_failure_wakes_gate_waiters(tiny_model, monkeypatch):
    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=16, max_num_seqs=2)  # left dead after
    monkeypatch.setenv(FAULT_ENV, str(llm.engine.num_steps + 2))

    async def body(engine: AsyncEngine):
        gate = engine.gate
        gate.hold()
        stream = await engine.add_request("r", [5, 6, 7], LONG)
        waiter = asyncio.ensure_future(blocking(gate.wait_parked, WAIT))
        gate.release()
        with pytest.raises(EngineDeadError):
            [o async for o in stream]
        assert await waiter in (True, False)  # returned, whether it saw the loop park or end
        assert await blocking(gate.wait_parked, WAIT) is False and engine.dead

    run(llm, body)


def test_hold_after_steps_env_hook(llm, monkeypatch):
    """For tests that run `mopt serve` as a process: the gate starts held with N steps allowed."""
    monkeypatch.setenv(HOLD_ENV, "4")

    async def body(engine: AsyncEngine):
        gate = engine.gate
        assert gate.is_held
        stream = await engine.add_request("r", [5, 6, 7], LONG)
        assert await blocking(gate.wait_parked, WAIT)
        assert gate.num_steps == 4 and engine.stats.num_running == 1  # stopped mid-request
        engine.abort_all()
        final = [o async for o in stream][-1]
        assert final.outputs[0].finish_reason == "abort" and 1 <= len(final.outputs[0].token_ids) <= 4

    run(llm, body)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_allow_validates(llm, bad):
    async def body(engine: AsyncEngine):
        with engine.gate.held(), pytest.raises(ValueError, match="num_steps must be a positive integer"):
            engine.gate.allow(bad)

    run(llm, body)


def test_allow_needs_a_held_gate(llm):
    async def body(engine: AsyncEngine):
        with pytest.raises(ValueError, match="call hold"):
            engine.gate.allow(1)

    run(llm, body)
