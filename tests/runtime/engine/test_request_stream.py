"""RequestStream merges the outputs that waited for a slow reader: the real AsyncEngine on the tiny Qwen3,
held by its StepGate so the outputs provably queue up before the reader takes one (on any machine)."""

from __future__ import annotations

import asyncio

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.async_engine import AsyncEngine, EngineDeadError, Mailbox, RequestStream
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.runtime.sampling_params import RequestOutputKind
from tests.async_run import blocking, run

WAIT = 30.0  # seconds; only a bound on a hang
PROMPT = [5, 6, 7, 8]


def params(**kw) -> SamplingParams:
    base = dict(max_tokens=10, ignore_eos=True, temperature=0.0, output_kind=RequestOutputKind.DELTA, logprobs=1)
    return SamplingParams(**(base | kw))


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=4)


async def queue_tokens(engine: AsyncEngine, stream, num_tokens: int) -> None:
    """With the gate held and nobody reading, run steps until `num_tokens` tokens wait in the mailbox."""

    def waiting() -> int:
        return sum(len(o.outputs[0].token_ids) for o in stream.queue.items if not isinstance(o, BaseException))

    while waiting() < num_tokens:
        assert await blocking(engine.gate.step, 1, WAIT) == 1
        await asyncio.sleep(0)  # the step's delivery (call_soon_threadsafe) reaches the mailbox


async def reference_ids(engine: AsyncEngine) -> list[int]:
    final = [o async for o in engine.generate("ref", PROMPT, params(output_kind=RequestOutputKind.FINAL_ONLY))]
    return final[-1].outputs[0].token_ids


def test_slow_reader_gets_what_waited_as_one_output_every_token_once(llm):
    async def body(engine: AsyncEngine):
        expected = await reference_ids(engine)
        with engine.gate.held():
            stream = await engine.add_request("r", PROMPT, params())
            await queue_tokens(engine, stream, 4)
            num_waiting = len(stream.queue.items)
            assert num_waiting >= 2  # several steps' outputs wait: the reader is behind
            outputs = aiter(stream)
            first = await anext(outputs)
            assert len(stream.queue.items) == 0  # all taken at once
            assert len(first.outputs[0].token_ids) >= 4 and not first.finished
        rest = [o async for o in outputs]  # released: the rest as it comes
        deltas = [first, *rest]
        ids = [t for o in deltas for c in o.outputs for t in c.token_ids]
        assert ids == expected  # greedy: the same tokens, each exactly once, in order
        for o in deltas:
            for c in o.outputs:
                assert [lp.token_id for lp in c.logprobs] == c.token_ids  # aligned with the tokens
        assert [c.finish_reason for o in deltas for c in o.outputs][-1] == "length"
        assert deltas[-1].finished and all(not o.finished for o in deltas[:-1])
        assert stream.finished and engine.num_in_flight == 0

    run(llm, body)


def test_cumulative_reader_gets_the_newest(llm):
    async def body(engine: AsyncEngine):
        with engine.gate.held():
            stream = await engine.add_request("r", PROMPT, params(output_kind=RequestOutputKind.CUMULATIVE))
            while len(stream.queue.items) < 3:
                assert await blocking(engine.gate.step, 1, WAIT) == 1
                await asyncio.sleep(0)
            newest = stream.queue.items[-1]
            outputs = aiter(stream)
            assert await anext(outputs) is newest
        last = [o async for o in outputs][-1]
        assert last.finished and len(last.outputs[0].token_ids) == 10

    run(llm, body)


def test_abort_with_merged_outputs_pending_frees_the_request(llm):
    async def body(engine: AsyncEngine):
        gate = engine.gate
        with gate.held():
            stream = await engine.add_request("r", PROMPT, params(max_tokens=100))
            await queue_tokens(engine, stream, 3)
            assert engine.stats.num_free_blocks < engine.stats.num_blocks
            outputs = aiter(stream)
            output = await anext(outputs)  # the merged output
            assert len(output.outputs[0].token_ids) >= 3
            await outputs.aclose()  # the reader leaves (as the server's stream does): the request is aborted
            assert stream.aborted and not stream.finished
            assert await blocking(gate.wait_parked, WAIT)  # the abort is applied while held
            assert engine.num_in_flight == 0 and engine.stats.num_running == 0
            assert engine.stats.num_free_blocks == engine.stats.num_blocks

    run(llm, body)


def test_engine_failure_is_raised_after_the_outputs_before_it(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=16, max_num_seqs=2)  # left dead after

    async def body(engine: AsyncEngine):
        engine.gate.hold()
        stream = await engine.add_request("r", PROMPT, params(max_tokens=100))
        await queue_tokens(engine, stream, 3)
        engine.fail(RuntimeError("worker lost"))
        while not isinstance(stream.queue.items[-1], BaseException):  # delivered behind the outputs
            await asyncio.sleep(0.01)
        received = []
        with pytest.raises(EngineDeadError, match="worker lost"):
            async for output in stream:
                received.append(output)
        assert len(received) == 1 and len(received[0].outputs[0].token_ids) >= 3  # merged, then the error
        assert engine.dead

    run(llm, body)


def test_a_failed_requests_output_comes_on_its_own_after_the_tokens_before_it(llm):
    """The server answers an output with `error` set by an error event alone: the tokens that waited
    before it must not ride in it (they are sent first, as they were unmerged)."""

    def output(ids, finish=None, error=None):
        completion = CompletionOutput(0, "x" * len(ids), ids, None, finish)
        return RequestOutput("r", None, PROMPT, [completion], finish is not None, error=error)

    async def body():
        mailbox = Mailbox()
        for item in (output([1]), output([2, 3]), output([], "error", "non-finite logits")):
            mailbox.put(item)
        stream = RequestStream(
            AsyncEngine.in_process(llm.engine), "r", mailbox, RequestOutputKind.DELTA
        )  # never started
        got = [o async for o in stream]
        assert [o.outputs[0].token_ids for o in got] == [[1, 2, 3], []]
        assert got[0].error is None and got[1].error == "non-finite logits" and got[1].finished

    asyncio.run(body())
