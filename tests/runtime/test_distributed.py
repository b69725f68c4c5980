"""runtime/distributed.py across real ranks (tests/runtime/spawn.py): results in rank order, real collectives,
failures reported with their rank."""

from __future__ import annotations

import pytest

from tests.runtime.spawn import run_ranks

pytestmark = pytest.mark.slow  # every test spawns gloo ranks


def _rank_and_sum(offset: int):
    import torch

    from model_optimizer.runtime.distributed import all_reduce, get_tp

    tp = get_tp()
    total = all_reduce(torch.tensor([float(tp.rank + offset)]))
    return tp.rank, tp.size, float(total.item())


def _fail_on_rank_one():
    from model_optimizer.runtime.distributed import get_tp

    if get_tp().rank == 1:
        raise ValueError("rank one refuses")
    return "fine"


def test_each_rank_runs_and_collectives_are_real():
    assert run_ranks(_rank_and_sum, 2, 10) == [(0, 2, 21.0), (1, 2, 21.0)]


def test_a_failing_rank_is_reported_with_its_traceback():
    with pytest.raises(RuntimeError, match=r"rank 1:(.|\n)*rank one refuses"):
        run_ranks(_fail_on_rank_one, 2)


def _fail_while_the_other_waits():
    import torch

    from model_optimizer.runtime.distributed import all_reduce, get_tp

    if get_tp().rank == 1:
        raise ValueError("rank one left")
    return all_reduce(torch.ones(1))  # never completes: rank 1 is gone


def test_a_rank_stuck_in_a_collective_does_not_hang_the_test():
    with pytest.raises(RuntimeError, match="rank one left"):
        run_ranks(_fail_while_the_other_waits, 2)
