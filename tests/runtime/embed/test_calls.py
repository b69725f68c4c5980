"""Embedder calls take turns at the model one batch at a time, first come first served, and stop before their
next batch once cancelled; a call's inputs may be bounded in tokens (the server: OpenAI's 300k).

Every test holds the model with a gate (each batch waits until the test lets it through), so what runs,
runs because of the turn order or the cancellation, on any machine: nothing is timed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from model_optimizer.runtime.embed.calls import Calls, EmbedCall, EmbedCancelled
from tests.runtime.embed.batch_gate import WAIT, BatchGate
from tests.runtime.server.live import wait_for


@pytest.fixture(scope="module")
def pairs(minilm_dir):
    """MiniLM running two inputs per batch, tokenizing on the calling thread."""
    from model_optimizer.runtime.embed import Embedder

    return Embedder(minilm_dir, device="cpu", max_num_seqs=2, tokenizer_threads=0)


TEXTS = [f"sentence number {i} about topic {i % 3}" for i in range(10)]  # five batches of two


def test_turns_go_first_come_first_served_and_a_cancelled_waiter_leaves_the_line():
    calls = Calls()
    first, second, third = EmbedCall(), EmbedCall(), EmbedCall()
    order: list[str] = []

    def take(call: EmbedCall, name: str) -> None:
        with calls.turn(call):
            order.append(name)

    pool = ThreadPoolExecutor(2)
    try:
        with calls.turn(first):
            second_turn = pool.submit(take, second, "second")
            wait_for(lambda: calls.num_waiting == 1, "the second call waits", WAIT)
            third_turn = pool.submit(take, third, "third")
            wait_for(lambda: calls.num_waiting == 2, "the third call waits", WAIT)
            calls.cancel(second)  # it leaves the line while the first still holds the model
            with pytest.raises(EmbedCancelled):
                second_turn.result(WAIT)
            assert calls.num_waiting == 1 and order == []
            order.append("first")
        third_turn.result(WAIT)
    finally:
        pool.shutdown()
    assert order == ["first", "third"] and calls.num_waiting == 0


def test_open_counts_calls_in_flight_and_cancel_all_reaches_each():
    calls = Calls()
    with calls.open(max_num_tokens=5) as one, calls.open() as two:
        assert calls.num_in_flight == 2
        calls.cancel_all()
        assert one.cancelled.is_set() and two.cancelled.is_set()
        with pytest.raises(ValueError, match=r"more than 5 tokens in all \(at least 6\)"):
            one.check_num_tokens(6)
        two.check_num_tokens(10**9)  # no bound
    assert calls.num_in_flight == 0


def test_a_cancelled_call_stops_before_its_next_batch(pairs, monkeypatch):
    gate = BatchGate(pairs, monkeypatch)
    with pairs.calls.open() as call, ThreadPoolExecutor(1) as pool:
        running = pool.submit(pairs.encode, TEXTS, call=call)
        gate.wait_entered(1)  # its first batch is in the model
        pairs.calls.cancel(call)
        gate.release_all()
        with pytest.raises(EmbedCancelled):
            running.result(WAIT)
    assert len(gate.ran) == 1  # four batches never ran
    assert len(pairs.encode(TEXTS).embeddings) == 10  # the embedder serves the next call as ever


def test_a_small_call_runs_after_one_batch_of_a_large_one_not_after_all(pairs, monkeypatch):
    gate = BatchGate(pairs, monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        large = pool.submit(pairs.encode, TEXTS)
        gate.wait_entered(1)  # the large call holds the model
        small = pool.submit(pairs.encode, ["a small request"])
        wait_for(lambda: pairs.calls.num_waiting == 1, "the small call waits for its turn", WAIT)
        gate.allow(1)  # the large call's first batch; its second goes to the back of the line
        gate.wait_entered(2)
        gate.release_all()
        assert len(small.result(WAIT).embeddings) == 1
        assert len(large.result(WAIT).embeddings) == 10
    sizes = [len(batch) for batch in gate.ran]
    assert sizes == [2, 1, 2, 2, 2, 2]  # the small one's batch came second


def test_a_token_bound_refuses_the_call_before_any_batch_for_token_ids(pairs, monkeypatch):
    gate = BatchGate(pairs, monkeypatch)
    gate.release_all()
    ids = pairs.tokenizer("four tokens here")["input_ids"]  # [CLS] four tokens here [SEP]
    with pairs.calls.open(max_num_tokens=2 * len(ids) - 1) as call:
        with pytest.raises(ValueError, match="the most one request may embed"):
            pairs.encode([ids, ids], call=call)
        with pytest.raises(ValueError, match="the most one request may embed"):
            pairs.encode(["four tokens here", "four tokens here"], call=call)
    assert gate.ran == []  # the tokenizer ran on the calling thread: every chunk counted before a batch
    with pairs.calls.open(max_num_tokens=2 * len(ids)) as call:
        assert pairs.encode([ids, "four tokens here"], call=call).num_tokens == [len(ids)] * 2
