"""Diagnose tests/gpu/test_fp8_kv_cache_stays_close: how far fp8-KV first-token top-5 logprobs move
from the bf16-KV ones, per tiny-Qwen3 seed, under one element-wise path (argv[1]):
  current  the model as it runs (Triton qk-norm + rotary, Triton fused element-wise kernels)
  eager    the torch references of the rotary and the fused element-wise ops (no Triton there)
Prints one line per seed: the largest |difference| per prompt. Run with PYTHONPATH=.
"""

import os
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests import tiny_checkpoints as tiny  # noqa: E402
from tests.conftest import TINY_MODELS, _config  # noqa: E402

way = sys.argv[1]
if way == "eager":
    import model_optimizer.runtime.layers.fusion as fusion
    import model_optimizer.runtime.layers.rotary as rotary

    rotary.triton_kernel = lambda module, name: None
    fusion.use_kernel = lambda *args, **kwargs: False
from model_optimizer import LLM, SamplingParams  # noqa: E402


def prompts(seed, count):
    rng = random.Random(seed)
    return [[rng.randrange(3, 1000) for _ in range(rng.randrange(1, 200))] for _ in range(count)]


root = Path(tempfile.mkdtemp())
tok = root / "tok"
tiny.build_tokenizer(tok)
kind, overrides = TINY_MODELS["qwen3"]
first = SamplingParams(temperature=0, max_tokens=1, logprobs=5)
for seed in range(int(os.environ.get("SEEDS", "4"))):
    out = root / f"qwen3-{seed}"
    tiny.build_checkpoint(out, _config(kind, **overrides), seed=seed, with_tokenizer=False)
    for f in tok.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    runs = []
    for kv in ("auto", "fp8"):
        llm = LLM(
            str(out),
            dtype="bfloat16",
            kv_cache_dtype=kv,
            gpu_memory_utilization=0.1,
            max_num_seqs=32,
            enforce_eager=True,
        )
        runs.append(llm.generate(prompts(3, 8), first))
        del llm
        torch.cuda.empty_cache()
    diffs = []
    for x, y in zip(*runs):
        a, b = x.outputs[0].logprobs[0].top, y.outputs[0].logprobs[0].top
        shared = set(a) & set(b)
        diffs.append(max(abs(a[t] - b[t]) for t in shared) if shared else float("nan"))
    print(f"{way} seed {seed}: max {max(diffs):.3f}  per prompt " + " ".join(f"{d:.3f}" for d in diffs), flush=True)
