"""Regressions found by the exactness stress search (scripts/engine_stress.py), each its minimal workload:
the engine must give every request the tokens it gets alone on a roomy, plain engine, and end with every
block free and no request left (stress_harness.py checks both, and the bookkeeping between steps)."""

from __future__ import annotations

from collections import Counter

import pytest

from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig
from model_optimizer.runtime.sampling_params import SamplingParams

from .stress_harness import Reference, run_workload
from .stress_workloads import Arrival, Workload, random_workload

GREEDY_40 = {"max_tokens": 40, "temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def reference(model_dir):
    return Reference(model_dir)


def test_a_preempted_request_past_the_budget_resumes_without_chunked_prefill(model_dir, reference):
    """Chunked prefill off, a budget (63) below max_model_len: two 62-token prompts outgrow 32 blocks, the later
    one is preempted with its outputs, and recomputing 65 tokens fits no step. It waited for ever (and so did
    the queue behind it); now it is recomputed in chunks."""
    settings = dict(dtype="float32", block_size=4, max_model_len=128, num_kv_blocks=32, max_num_batched_tokens=63)
    settings |= dict(enable_chunked_prefill=False, enable_prefix_caching=False, async_scheduling=False)
    arrivals = [Arrival(f"r{i}", [5 + i] * 62, GREEDY_40) for i in range(2)]
    coverage: Counter = Counter()
    assert run_workload(model_dir, Workload(settings | {"max_decode_stall": 0}, arrivals), reference, coverage) == []
    assert coverage["preemptions"] > 0


def test_without_chunked_prefill_the_decode_stall_bound_never_splits_a_prompt():
    """The bound caps prefill tokens by cutting chunks; with chunked prefill off it cut a 50-token prompt to
    the 16 it allowed beside a decoding request."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128, enable_chunked_prefill=False)
    scheduler = Scheduler(config, KVCacheManager(64, 4))
    decoding = Request("a", [1, 2, 3], SamplingParams(max_tokens=10), max_tokens=10)
    scheduler.add_request(decoding)
    scheduler.update_from_output(scheduler.schedule(), {"a": (5, None)})
    scheduler.add_request(Request("b", list(range(10, 60)), SamplingParams(max_tokens=10), max_tokens=10))
    assert scheduler.schedule(max_prefill_tokens=16).num_scheduled_tokens == {"a": 1, "b": 50}


SEARCH_SEEDS = [26, 28, 53, 55, 61, 89, 108, 109, 115, 149, 151, 176]
"""Seeds of scripts/engine_stress.py's search (all on the tiny Qwen3) that together chunk prompts, preempt
(recompute and swap), hit the prefix cache on the GPU and in the host tier, speculate, and abort mid-prefill
and right after a preemption, under async and sync steps, priority order, chunked prefill off, and every
output kind. A change to the workload generator changes what they draw: pick them again then."""


@pytest.mark.slow
def test_a_fixed_sample_of_the_random_search_runs_exactly(model_dir, reference):
    coverage: Counter = Counter()
    for seed in SEARCH_SEEDS:
        workload = random_workload(seed)
        assert workload.model == "qwen3"
        findings = [f for f in run_workload(model_dir, workload, reference, coverage) if f.kind != "near_tie"]
        assert findings == [], f"seed {seed}"
    exercised = ("partial_prefills", "preemptions", "swapped_out_blocks", "host_hit_tokens", "spec_accepted_tokens")
    assert all(coverage[name] for name in exercised + ("aborted_prefill", "aborted_preempted")), coverage
