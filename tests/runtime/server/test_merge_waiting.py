"""merge_waiting: what waited for a multi-prompt group's reader, merged per prompt, failures kept apart."""

from __future__ import annotations

from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.runtime.sampling_params import RequestOutputKind
from model_optimizer.runtime.server.request_group import merge_waiting

DELTA = RequestOutputKind.DELTA


def output(prompt: int, ids: list[int], finish=None, error=None) -> RequestOutput:
    completion = CompletionOutput(0, "".join(chr(97 + t) for t in ids), ids, None, finish)
    return RequestOutput(f"g-{prompt}", None, [1], [completion], finish is not None, error=error)


def ids(merged) -> list[tuple[int, list[int]]]:
    return [(i, o.outputs[0].token_ids) for i, o in merged]


def test_interleaved_prompts_merge_each_in_order():
    waiting = [(0, output(0, [1])), (1, output(1, [5])), (0, output(0, [2])), (1, output(1, [6], "length"))]
    merged, error = merge_waiting(waiting, [DELTA, DELTA])
    assert error is None and ids(merged) == [(0, [1, 2]), (1, [5, 6])]
    assert [o.finished for _, o in merged] == [False, True] and merged[0][1].outputs[0].text == "bc"


def test_an_exception_is_returned_after_what_came_before_it():
    boom = RuntimeError("engine died")
    waiting = [(0, output(0, [1])), (0, output(0, [2])), (1, boom), (1, output(1, [5]))]
    merged, error = merge_waiting(waiting, [DELTA, DELTA])
    assert error is boom and ids(merged) == [(0, [1, 2])]


def test_a_failed_output_goes_alone_and_the_rest_still_arrives():
    failed = output(1, [], "error", "non-finite logits")
    waiting = [(1, output(1, [5])), (1, failed), (0, output(0, [1])), (0, output(0, [2], "length"))]
    merged, error = merge_waiting(waiting, [DELTA, DELTA])
    assert error is None and ids(merged) == [(1, [5]), (1, []), (0, [1, 2])]
    assert merged[1][1] is failed and merged[2][1].finished  # no prompt's finish is lost
