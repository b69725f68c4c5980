"""The shared zeroed counters of the kernels whose last program finishes a group (kernels/counters.py)."""

import gc
import weakref

import torch

from model_optimizer.runtime.kernels.counters import Counters


def test_counters_are_made_zeroed_kept_and_grown_on_demand():
    counters = Counters(min_size=8)
    cpu = torch.device("cpu")
    first = counters.get(cpu, 3)
    assert first.dtype == torch.int32 and first.numel() == 8 and not first.any()
    assert counters.get(cpu, 8) is first  # enough already: the same buffer, never re-zeroed
    grown = counters.get(cpu, 9)
    assert grown is not first and grown.numel() == 16 and not grown.any()  # doubled, at least the size asked
    assert counters.get(cpu, 40).numel() == 40


def test_a_grown_buffer_stays_allocated_for_the_graphs_captured_on_it():
    counters = Counters(min_size=8)
    cpu = torch.device("cpu")
    first = weakref.ref(counters.get(cpu, 8))
    counters.get(cpu, 100)
    gc.collect()
    assert first() is not None  # a decode graph captured on it would still write its atomics there
