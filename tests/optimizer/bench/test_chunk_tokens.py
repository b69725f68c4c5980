"""The bench client counts tokens per chunk (servers merge what a slow reader left waiting), so ITL is
timed per token and output counts stay right when a chunk carries several tokens."""

from __future__ import annotations

import pytest

from model_optimizer.optimizer.bench.chunks import chunk_token_counts
from model_optimizer.optimizer.bench.metrics import itls, summarize, tpot
from model_optimizer.optimizer.bench.record import RequestRecord


def test_known_counts_are_kept():
    assert chunk_token_counts([1, 3, 0, 2], [1, 9, 4, 2], total=6) == [1, 3, 0, 2]
    assert chunk_token_counts([], [], total=None) == []


def test_unknown_counts_are_one_each_without_usage_or_surplus():
    assert chunk_token_counts([None, None, None], [1, 5, 2], total=None) == [1, 1, 1]
    assert chunk_token_counts([None, None, None], [1, 5, 2], total=3) == [1, 1, 1]


def test_usage_surplus_goes_to_the_chunks_with_more_text():
    # 7 tokens in 4 chunks: the one chunk with 4x the text took the 3 extra tokens
    assert chunk_token_counts([None, None, None, None], [3, 12, 3, 3], total=7) == [1, 4, 1, 1]
    counts = chunk_token_counts([None] * 10, [1] * 9 + [90], total=11)  # 9 raised to one: the big one gives back
    assert counts == [1] * 9 + [2]
    counts = chunk_token_counts([None, 2, None], [0, 8, 0], total=10)  # no text to go by: evenly
    assert counts[1] == 2 and sum(counts) == 10 and sorted([counts[0], counts[2]]) == [4, 4]


def record(times: list[float], tokens: list[int], output_tokens: int) -> RequestRecord:
    rec = RequestRecord(0, 8, output_tokens, send=0.0, end=times[-1], chunk_times=times, chunk_tokens=tokens)
    rec.output_tokens = output_tokens
    return rec


def test_itl_splits_a_chunks_gap_over_its_tokens():
    rec = record([0.1, 0.2, 0.5, 0.6], [1, 1, 3, 1], 6)
    assert itls(rec) == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1])  # one gap per token after the first
    assert tpot(rec) == pytest.approx(0.5 / 5)  # TPOT from the token count, as before
    assert summarize([rec])["itl_ms"]["count"] == 5


def test_itl_of_a_chunk_without_tokens_moves_to_the_next():
    rec = record([0.1, 0.2, 0.4], [1, 0, 2], 3)  # text released at finish with no token of its own
    assert itls(rec) == pytest.approx([0.15, 0.15])


def test_records_without_counts_are_one_token_per_chunk():
    rec = record([0.1, 0.3, 0.6], [], 3)  # a run file written before chunk_tokens existed
    assert itls(rec) == pytest.approx([0.2, 0.3])
