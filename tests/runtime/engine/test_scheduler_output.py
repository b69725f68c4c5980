"""SchedulerOutput crosses a process boundary under tensor parallelism: pickling must give it back whole."""

import pickle

from model_optimizer.runtime.engine.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from model_optimizer.runtime.sampling_params import SamplingParams


def test_a_pickled_step_comes_back_equal_field_by_field():
    out = SchedulerOutput(
        step_id=7,
        new_requests=[NewRequestData("new", [1, 2, 3], [], SamplingParams(temperature=0.5, seed=3), [4, 5], 2)],
        cached_requests=[CachedRequestData(f"r{i}", [i] if i % 2 else [], 10 + i) for i in range(5)],
        num_scheduled_tokens={"new": 1, **{f"r{i}": 1 for i in range(5)}},
        finished_request_ids={"gone"},
        sampling_request_ids={"new", "r0"},
        needs_history=True,
        num_prompt_tokens=1,
    )
    back = pickle.loads(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == out
    assert [type(r) for r in back.cached_requests] == [CachedRequestData] * 5
    assert back.total_num_scheduled_tokens == 6


def test_an_empty_step_pickles():
    assert pickle.loads(pickle.dumps(SchedulerOutput())) == SchedulerOutput()
