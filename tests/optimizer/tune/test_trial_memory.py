"""A trial's peak GPU memory counts only the GPUs CUDA_VISIBLE_DEVICES gives it: NVML sees every GPU of the
host, and two studies run side by side on one machine must not report each other's memory."""

from __future__ import annotations

from model_optimizer.optimizer.tune.trial import TrialResult, _fill, visible_gpu_indices

BENCH = {
    "summary": {
        "num_ok": 2,
        "goodput": 1.0,
        "request_rate": 1.0,
        "output_throughput": 8.0,
        "ttft_ms": {"p99": 10.0},
        "tpot_ms": {"p99": 2.0},
        "prompt_tokens": 32,
        "output_tokens": 16,
    },
    "gpu": {
        "available": True,
        "gpus": [{"index": 0, "mem_used_gib": {"max": 120.0}}, {"index": 1, "mem_used_gib": {"max": 40.0}}],
    },
}


def test_visible_gpu_indices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_indices() is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert visible_gpu_indices() == {1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert visible_gpu_indices() == {0, 1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5b1c")  # UUIDs: cannot be matched to NVML numbers here
    assert visible_gpu_indices() is None


def test_peak_memory_of_the_visible_gpu_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    result = TrialResult(settings={})
    _fill(result, BENCH, None)
    assert (result.memory_gib, result.memory_source) == (40.0, "nvml")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    result = TrialResult(settings={})
    _fill(result, BENCH, None)
    assert result.memory_gib == 120.0  # every GPU: the largest
