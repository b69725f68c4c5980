"""graph_capture.capturing: a capture another thread's CUDA queries cannot invalidate, with the garbage
collector held (a GPU test run once failed an engine start with "operation failed due to a previous
error during capture")."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from model_optimizer.runtime.graph_capture import capturing

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_captures_survive_another_threads_stream_queries():
    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    side = torch.cuda.Stream()
    stop = threading.Event()
    queries = []

    def query() -> None:  # an event/stream query is "unsafe" during a capture in torch's global mode
        while not stop.is_set():
            queries.append(side.query())

    thread = threading.Thread(target=query, daemon=True)
    thread.start()
    try:
        outputs = []
        for _ in range(50):
            graph = torch.cuda.CUDAGraph()
            with capturing(graph):
                y = x * 2 + 1
            graph.replay()
            outputs.append(y)
    finally:
        stop.set()
        thread.join(10)
    torch.cuda.synchronize()
    assert queries and all(torch.equal(y, x * 2 + 1) for y in outputs)


def test_the_collector_is_held_during_the_capture_and_restored_after():
    x = torch.ones(8, device="cuda")
    seen = []
    graph = torch.cuda.CUDAGraph()
    with capturing(graph):
        seen.append(gc.isenabled())
        x.mul_(2)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        with capturing(torch.cuda.CUDAGraph()):
            x.add_(1)
        assert not gc.isenabled()  # a caller's own setting is left as it was
    finally:
        gc.enable()
