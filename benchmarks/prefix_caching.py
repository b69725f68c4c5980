"""Time to first token with and without prefix caching: 64 requests sharing a 2,000-token prefix.

    PYTHONPATH=. python3 benchmarks/prefix_caching.py [--output FILE]

Each request is the shared prefix plus 32 tokens of its own. One request warms the cache first
(as a system prompt would in a service), then the 64 arrive together; TTFT is measured per request
from its arrival to its first token. Qwen3-0.6B's config, dummy bf16 weights.
"""

from __future__ import annotations

import argparse
import random
import statistics

from common import CONFIGS, RESULTS, environment, write_json

PREFIX_LEN = 2000
SUFFIX_LEN = 32
NUM_REQUESTS = 64


def measure(enable_prefix_caching: bool, prompts: list[list[int]], warm: list[int]) -> dict:
    from model_optimizer import LLM, SamplingParams

    llm = LLM(
        str(CONFIGS / "qwen3-0.6b"),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=4096,
        enable_prefix_caching=enable_prefix_caching,
        gpu_memory_utilization=0.5,
    )
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, detokenize=False)
    llm.generate([warm], params)  # compile kernels; with caching on, also caches the prefix
    outputs = llm.generate(prompts, params)
    ttfts = [o.metrics.ttft for o in outputs]
    stats = llm.engine.stats()
    del llm
    return {
        "enable_prefix_caching": enable_prefix_caching,
        "ttft_mean_ms": statistics.mean(ttfts) * 1e3,
        "ttft_p50_ms": statistics.median(ttfts) * 1e3,
        "ttft_max_ms": max(ttfts) * 1e3,
        "prefix_cache_hit_rate": stats.prefix_cache_hit_rate,
        "cached_tokens_mean": statistics.mean(o.num_cached_tokens for o in outputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=str(RESULTS / "prefix_caching_h200.json"))
    args = parser.parse_args()
    rng = random.Random(0)
    prefix = [rng.randrange(1, 10000) for _ in range(PREFIX_LEN)]
    prompts = [prefix + [rng.randrange(1, 10000) for _ in range(SUFFIX_LEN)] for _ in range(NUM_REQUESTS)]
    warm = prefix + [rng.randrange(1, 10000) for _ in range(SUFFIX_LEN)]
    result = {
        "benchmark": "prefix_caching_ttft",
        "environment": environment(),
        "workload": {"num_requests": NUM_REQUESTS, "prefix_len": PREFIX_LEN, "suffix_len": SUFFIX_LEN},
    }
    import gc

    import torch

    for enabled in (False, True):
        result["with" if enabled else "without"] = measure(enabled, prompts, warm)
        gc.collect()
        torch.cuda.empty_cache()
        print(result["with" if enabled else "without"], flush=True)
    result["ttft_ratio_mean"] = result["with"]["ttft_mean_ms"] / result["without"]["ttft_mean_ms"]
    write_json(args.output, result)


if __name__ == "__main__":
    main()
