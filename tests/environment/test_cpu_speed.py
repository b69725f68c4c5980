"""What this CPU runs fastest, measured once and cached: the dtype `--dtype auto` gives a bfloat16
checkpoint on the CPU, and the intra-op thread count the engine runs on."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer.environment import cpu_speed as cs
from model_optimizer.environment import recommended_settings
from model_optimizer.runtime.device import pick_device
from model_optimizer.runtime.models.loader import resolve_dtype
from model_optimizer.runtime.models.model_config import DecoderArgs


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache folder, and no verdict remembered by this process."""
    monkeypatch.setenv("MOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cs, "_seen", {})
    return tmp_path / cs.CACHE_FILE


def _write_verdict(path, dtype: str, num_threads: int) -> None:
    entry = cs.CpuSpeed(dtype, num_threads, cs.cpu_model_name(), cs.usable_cores(), torch.__version__)
    path.write_text(json.dumps({"schema": cs.SCHEMA, "entries": {cs.cache_key(): entry.to_dict()}}))


def test_measured_once_then_read_from_the_cache(cache, monkeypatch):
    first = cs.cpu_speed()
    assert first.source == "measured" and first.dtype in ("float32", "bfloat16") and first.num_threads >= 1
    assert any(k.startswith("bfloat16") for k in first.timings_ms) and first.gflops > 0
    stored = json.loads(cache.read_text())["entries"]
    assert list(stored) == [cs.cache_key()]
    assert cs.cpu_model_name() in cs.cache_key() and torch.__version__ in cs.cache_key()

    def no_measuring():
        raise AssertionError("measured again although the cache holds this CPU")

    monkeypatch.setattr(cs, "measure", no_measuring)
    monkeypatch.setattr(cs, "_seen", {})  # a new process
    again = cs.cpu_speed()
    assert again.source == "cached" and (again.dtype, again.num_threads) == (first.dtype, first.num_threads)


def test_omp_num_threads_is_the_users_word(cache, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    speed = cs.cpu_speed()
    assert speed.num_threads == 1
    assert [k for k in speed.timings_ms if k.startswith("float32")] == ["float32 x 1 thread"]  # no other count tried
    assert "OMP_NUM_THREADS=1" in cs.cache_key()


@pytest.mark.parametrize("verdict", ["float32", "bfloat16"])
def test_auto_dtype_of_a_bf16_checkpoint_on_the_cpu_follows_the_measurement(cache, verdict):
    _write_verdict(cache, verdict, 1)
    args = DecoderArgs.from_dict(
        {
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 100,
            "torch_dtype": "bfloat16",
        }
    )
    assert resolve_dtype("auto", args, torch.device("cpu")) == getattr(torch, verdict)
    assert resolve_dtype("bfloat16", args, torch.device("cpu")) == torch.bfloat16  # asked for: kept
    args.torch_dtype = "float16"
    assert resolve_dtype("auto", args, torch.device("cpu")) == torch.float32
    args.torch_dtype = "float32"
    assert resolve_dtype("auto", args, torch.device("cpu")) == torch.float32  # never below the checkpoint


def test_the_cpu_runs_on_the_measured_thread_count(cache, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _write_verdict(cache, "float32", 1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert pick_device("cpu").type == "cpu"
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_doctor_recommends_what_the_cpu_measured(cache):
    import doctor_edits as E

    snap = E.load(E.CPU_SNAPSHOT)
    assert recommended_settings(snap)["dtype"] == "float32"  # nothing measured: the safe choice
    snap["cpu_speed"] = cs.CpuSpeed("bfloat16", 2, "x", 2, "2", {"float32 x 2 threads": 9.0}).to_dict()
    settings = recommended_settings(snap)
    assert settings["dtype"] == "bfloat16" and settings["num_threads"] == 2
    assert any("float32 x 2 threads 9.0 ms" in note for note in settings["notes"])
