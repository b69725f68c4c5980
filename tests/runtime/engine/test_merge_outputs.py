"""merge_outputs: consecutive outputs of one request as one, for each output kind, every field defined."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.engine.outputs import (
    CompletionOutput,
    Logprob,
    RequestMetrics,
    RequestOutput,
    RequestOutputKind,
    merge_outputs,
)

DELTA, CUMULATIVE, FINAL_ONLY = RequestOutputKind.DELTA, RequestOutputKind.CUMULATIVE, RequestOutputKind.FINAL_ONLY


def lp(token_id: int) -> Logprob:
    return Logprob(token_id, -0.1 * token_id, 1, {token_id: -0.1 * token_id, 99: -5.0})


def completion(index: int, ids: list[int], text: str, finish=None, stop=None, logprobs=True) -> CompletionOutput:
    return CompletionOutput(index, text, list(ids), [lp(t) for t in ids] if logprobs else None, finish, stop)


def output(outputs, finished=False, step=0, **kw) -> RequestOutput:
    metrics = RequestMetrics(arrival_time=1.0, first_token_time=2.0, finished_time=9.0 if finished else None)
    metrics.num_preemptions = step
    return RequestOutput("r", "prompt", [1, 2, 3], outputs, finished, metrics=metrics, **kw)


def test_deltas_concatenate_tokens_text_and_aligned_logprobs():
    parts = [
        output([completion(0, [10], "a")], step=0, num_cached_tokens=0),
        output([completion(0, [11, 12], "bc")], step=1, num_cached_tokens=2),
        output([completion(0, [13], "d", finish="stop", stop="e")], finished=True, step=2, num_cached_tokens=2),
    ]
    merged = merge_outputs(parts, DELTA)
    [c] = merged.outputs
    assert (c.index, c.token_ids, c.text) == (0, [10, 11, 12, 13], "abcd")
    assert [x.token_id for x in c.logprobs] == c.token_ids  # one logprob per token, in order
    assert (c.finish_reason, c.stop_reason, c.finished()) == ("stop", "e", True)
    assert merged.finished and merged.request_id == "r"
    assert merged.prompt == "prompt" and merged.prompt_token_ids == [1, 2, 3]
    assert merged.metrics is parts[-1].metrics and merged.metrics.num_preemptions == 2  # the newest
    assert merged.num_cached_tokens == 2 and merged.error is None
    assert merged.num_output_tokens == 4
    # the deltas themselves are left as they were (nothing else may hold them, but merging copies)
    assert parts[0].outputs[0].token_ids == [10] and len(parts[0].outputs[0].logprobs) == 1


def test_deltas_unfinished_keep_no_finish_and_no_logprobs_stay_none():
    parts = [output([completion(0, [5], "x", logprobs=False)]), output([completion(0, [6], "", logprobs=False)])]
    merged = merge_outputs(parts, DELTA)
    [c] = merged.outputs
    assert c.token_ids == [5, 6] and c.text == "x" and c.logprobs is None
    assert c.finish_reason is None and c.stop_reason is None and not merged.finished


def test_n_completions_merge_by_index_when_outputs_hold_only_some():
    """With n > 1 an output holds only the completions with news: merge by index, not by position."""
    parts = [
        output([completion(0, [1], "a"), completion(1, [7], "x")]),
        output([completion(1, [8], "y", finish="length")]),  # completion 0 had nothing new
        output([completion(0, [2], "b"), completion(2, [4], "q")]),
        output([completion(0, [], "", finish="stop", stop=2)], finished=True),  # a finish with no token
    ]
    merged = merge_outputs(parts, DELTA)
    by_index = {c.index: c for c in merged.outputs}
    assert [c.index for c in merged.outputs] == [0, 1, 2]
    assert by_index[0].token_ids == [1, 2] and by_index[0].text == "ab" and by_index[0].finish_reason == "stop"
    assert by_index[0].stop_reason == 2 and [x.token_id for x in by_index[0].logprobs] == [1, 2]
    assert by_index[1].token_ids == [7, 8] and by_index[1].text == "xy" and by_index[1].finish_reason == "length"
    assert by_index[2].token_ids == [4] and by_index[2].finish_reason is None
    assert merged.finished


def test_error_of_a_failed_request_survives_the_merge():
    parts = [
        output([completion(0, [1], "a")]),
        output([completion(0, [], "", finish="error")], finished=True, error="non-finite logits"),
    ]
    merged = merge_outputs(parts, DELTA)
    assert merged.error == "non-finite logits" and merged.outputs[0].finish_reason == "error"


@pytest.mark.parametrize("kind", [CUMULATIVE, FINAL_ONLY])
def test_cumulative_and_final_only_keep_the_newest(kind):
    parts = [output([completion(0, [1], "a")]), output([completion(0, [1, 2], "ab", finish="length")], finished=True)]
    assert merge_outputs(parts, kind) is parts[-1]


@pytest.mark.parametrize("kind", list(RequestOutputKind))
def test_one_output_is_itself(kind):
    one = output([completion(0, [1], "a")])
    assert merge_outputs([one], kind) is one


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="at least one"):
        merge_outputs([], DELTA)
    other = output([completion(0, [1], "a")])
    other.request_id = "s"
    with pytest.raises(ValueError, match="one request"):
        merge_outputs([output([completion(0, [1], "a")]), other], DELTA)
