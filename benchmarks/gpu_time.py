"""GPU time of one kernel call, free of launch overhead: what a decode step's CUDA graph pays per linear.

Timing each call between two events (triton's `do_bench`) measures the host when the host is the
slower side: a quantized decode GEMV takes 5-20 us on an H200, its Python launch about as long, so
the GPU queue drains between calls and every candidate measures the same launch cost. Here
`launches` back-to-back calls, each on the next of several weight sets, are captured once in a
CUDA graph and the graph is replayed between two events: the GPU never waits for the host, and the
figure is (replays' time) / (replays x launches), kernel-to-kernel gaps of a graph included, as in
the engine. The weight sets rotate so that the bytes one graph touches exceed the L2 (50 MB on an
H200): each call reads its weights from HBM, as in a model whose layers do not fit in L2. The
caller makes enough sets (`sets_for`); no L2 flush is needed in between.

    from gpu_time import gpu_time_ms
    ms = gpu_time_ms(lambda w: fn(x, *w), weight_sets)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

L2_ROTATE_BYTES = 128 << 20
"""Bytes the rotated weight sets should cover together: beyond the H200's 50 MB L2 with margin."""


def sets_for(weight_bytes: int, rotate_bytes: int = L2_ROTATE_BYTES, limit: int = 64) -> int:
    """Weight sets to rotate so that one pass over them exceeds the L2 (at least 2, at most `limit`)."""
    return max(2, min(limit, -(-rotate_bytes // max(1, weight_bytes))))


def gpu_time_ms(
    call: Callable[[object], object],
    sets: Sequence[object],
    min_launches: int = 20,
    max_launches: int = 64,
    target_ms: float = 10.0,
    samples: int = 3,
    stream_fallback: bool = True,
) -> float:
    """Median over `samples` of the GPU ms of one `call(set)`, from CUDA-graph replays of
    max(min_launches, min(len(sets), max_launches)) calls cycling through `sets`.

    Every set is called once before the capture (Triton compiles, split-K counters and allocator
    blocks exist before it, as the engine warms up before capturing). A call that cannot be
    captured falls back to `stream_time_ms`, unless `stream_fallback` is False: then its error is raised
    (a figure of host launch time would pass for a slow kernel)."""
    import torch

    launches = max(min_launches, min(len(sets), max_launches))
    order = [sets[i % len(sets)] for i in range(launches)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for weights in sets[:launches]:
            call(weights)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for weights in order:
                call(weights)
    except Exception:  # a host sync or a capture-unsafe op inside `call`
        del graph
        torch.cuda.synchronize()
        if not stream_fallback:
            raise
        return stream_time_ms(call, sets)
    graph.replay()  # first replay uploads the graph
    first = _replays_ms(graph, 1)
    replays = max(2, min(200, round(target_ms / samples / max(first, 1e-3))))
    times = [_replays_ms(graph, replays) / (replays * launches) for _ in range(samples)]
    del graph
    return statistics.median(times)


def _replays_ms(graph, replays: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def stream_time_ms(call: Callable[[object], object], sets: Sequence[object], launches: int = 400) -> float:
    """Fallback without a graph: `launches` calls enqueued back to back between two events, divided.
    Honest only while the GPU time of a call exceeds its launch time (the queue never drains); an
    upper bound otherwise."""
    import torch

    for weights in sets:
        call(weights)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(launches):
        call(sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / launches
