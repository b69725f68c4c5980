"""LogprobList (columns) reads as the list of Logprob it holds: what the offline API's callers index,
iterate, slice, compare, add and pickle."""

from __future__ import annotations

import pickle
import random

import pytest

from model_optimizer.runtime.engine.logprob_list import LogprobList, join_logprobs
from model_optimizer.runtime.sampler_output import Logprob


def logprobs(rng: random.Random, n: int) -> list[Logprob]:
    out = []
    for _ in range(n):
        top = {rng.randrange(50): -rng.random() * 5 for _ in range(rng.randint(0, 4))}
        out.append(Logprob(rng.randrange(50), -rng.random() * 5, rng.randint(1, 40), top))
    return out


def test_reads_as_the_list_it_holds():
    rng = random.Random(0)
    for _ in range(50):
        lps = logprobs(rng, rng.randint(0, 7))
        columns = LogprobList.of(lps)
        assert len(columns) == len(lps) and list(columns) == lps and columns == lps
        for i in range(-len(lps), len(lps)):
            assert columns[i] == lps[i]
        a, b = sorted(rng.randint(-8, 8) for _ in range(2))
        assert list(columns[a:b]) == lps[a:b] and list(columns[::2]) == lps[::2]
        assert columns + lps == lps + lps and lps + columns == lps + lps
        assert pickle.loads(pickle.dumps(columns)) == lps


def test_index_errors_and_equality_as_a_list():
    columns = LogprobList.of([Logprob(1, -0.5, 1, {1: -0.5})])
    with pytest.raises(IndexError):
        columns[1]
    assert columns != [Logprob(1, -0.5, 1, {1: -0.25})] and columns != []


def test_extend_copy_and_join_leave_their_sources_alone():
    rng = random.Random(1)
    first, second = logprobs(rng, 3), logprobs(rng, 2)
    a, b = LogprobList.of(first), LogprobList.of(second)
    joined = join_logprobs([a, b])
    assert joined == first + second and a == first and b == second
    copy = a.copy()
    copy.extend(b)
    assert copy == first + second and a == first
    assert join_logprobs([a, second]) == first + second  # a plain list among them: a plain list out
