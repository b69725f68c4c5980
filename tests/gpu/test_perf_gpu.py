"""[perf] checks that need CUDA: logprobs copied with the ids (no sync to read them), Triton's cache
filled in our folder, no torch._inductor with or without enforce_eager, serving without transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from model_optimizer.runtime.kernels import compile_cache
from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
from model_optimizer.runtime.runner.step_handle import StepHandle
from model_optimizer.runtime.sampling_params import SamplingParams
from tests.runtime.server.test_process import REPO


def test_logprobs_arrive_with_the_ids_and_match_the_cpu_values():
    """After the ids' event fired, building the Logprob objects reads only pinned host memory:
    sync debug mode "error" raises on any synchronizing CUDA call."""
    torch.manual_seed(0)
    logits = torch.randn(5, 1000) * 2
    batch = [SamplingInput(SamplingParams(temperature=0, logprobs=k), [1], []) for k in (0, 1, 5, None, 3)]
    sampled = Sampler(torch.device("cuda"), fused=True).sample(logits.cuda(), batch)
    handle = StepHandle.start([], batch, sampled)
    assert sampled.logprobs.host is not None and all(t.is_pinned() for t in sampled.logprobs.host)
    token_ids = handle.wait()
    torch.cuda.set_sync_debug_mode("error")
    try:
        results = Sampler.results(token_ids, sampled.logprobs, batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    expected = Sampler(torch.device("cpu"), fused=False)(logits.clone(), batch)
    for (token, got), (want_token, want) in zip(results, expected):
        assert token == want_token
        if want is None:
            assert got is None
            continue
        assert got.rank == want.rank == 1 and abs(got.logprob - want.logprob) < 1e-4
        assert list(got.top) == list(want.top)
        assert all(abs(got.top[t] - want.top[t]) < 1e-4 for t in want.top)


def _probe(code: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in compile_cache.CACHE_VARIABLES}
    env.update(
        {compile_cache.CACHE_DIR_ENV: str(tmp_path), "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")}
    )
    return env


def test_triton_cache_fills_our_folder_and_inductor_never_loads(tiny_model, tmp_path):
    """With or without enforce_eager nothing goes through torch.compile (runtime/layers/fusion.py runs our
    own Triton kernels), so torch._inductor is never imported; Triton's cache fills our folder."""
    model = str(tiny_model("qwen3"))
    code = (
        "import json, os, sys\nfrom model_optimizer.runtime.llm import LLM\n"
        f"llm = LLM({model!r}, max_model_len=128, gpu_memory_utilization=0.3, enforce_eager=%s)\n"
        "llm.generate([[1, 2, 3]])\n"
        "print(json.dumps({'inductor': 'torch._inductor' in sys.modules, 'transformers': 'transformers' in sys.modules,"
        " 'triton_dir': os.environ['TRITON_CACHE_DIR']}))"
    )
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm{major}{minor}"  # the key names the architecture (compile_cache.cache_key), not the card
    for eager in ("True", "False"):
        seen = _probe(code % eager, _env(tmp_path / eager))
        assert seen["inductor"] is False and seen["transformers"] is False
        assert seen["triton_dir"].startswith(str(tmp_path / eager))
        assert f"_{arch}-" in seen["triton_dir"]  # the architecture is in the key
        assert os.path.isdir(seen["triton_dir"]) and any(os.scandir(seen["triton_dir"])), seen["triton_dir"]


def _synchronizing_calls(llm, params: SamplingParams) -> int:
    """CUDA calls that synchronize implicitly (.item(), .tolist() of a device tensor ...) during a generate."""
    import warnings

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            llm.generate([[1, 2, 3, 4]] * 4, params)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def test_a_request_with_logprobs_adds_no_synchronizing_call(tiny_model):
    """The same generation with and without logprobs=5 makes the same number of implicit syncs."""
    from model_optimizer.runtime.llm import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, gpu_memory_utilization=0.3)
    plain = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with_logprobs = plain.clone(logprobs=5)
    llm.generate([[1, 2, 3, 4]] * 4, with_logprobs)  # warm-up: compiles and captures outside the count
    assert _synchronizing_calls(llm, with_logprobs) == _synchronizing_calls(llm, plain)
