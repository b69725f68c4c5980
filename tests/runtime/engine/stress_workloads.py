"""Random engine workloads for the exactness stress search (scripts/engine_stress.py) and its regression tests.

A workload is plain data, printable as Python: engine settings drawn at random (tiny KV pools that force
preemption, block sizes, step budgets small enough to chunk, chunked prefill, partial prefills, priority
scheduling, async scheduling, prefix caching, the host KV tier and swap preemption, the decode-stall bound)
and requests that arrive between steps, share random prefixes (whole and partial blocks), ask for n
completions, stops, min_tokens, seeded or greedy sampling, logprobs and prompt logprobs, and may be aborted
at a step, mid-prefill, right after a preemption or after some output. One seed gives one workload.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

VOCAB_LO, VOCAB_HI = 3, 1000
"""Prompt token ids are drawn from here: the tiny checkpoints' real vocabulary, special tokens left out."""
MODELS = ("qwen3",) * 6 + ("llama3", "gemma3", "mixtral", "deepseek_v2", "qwen3_moe", "glm4")
"""Tiny checkpoints drawn from, mostly Qwen3: GQA 1, sliding windows (gemma3's of 16, mixtral's of 24),
latent attention (deepseek_v2), experts."""
STOP_STRINGS = ("e", "th", "\n", " a", "s ", ".", "in", "(")
"""Short strings that the tiny model's text contains often enough for stop strings to end requests."""
ABORT_KINDS = ("step", "prefill", "preempted", "tokens")
"""When a request is aborted: `step` k engine steps after it arrived, `prefill` while its prompt is part
computed, `preempted` between steps while it waits preempted, `tokens` once a completion has k tokens."""


@dataclass
class Arrival:
    """One request of a workload."""

    request_id: str
    prompt: list[int]
    params: dict
    """SamplingParams keyword arguments."""
    step: int = 0
    """Engine steps run before it is added."""
    priority: int = 0
    abort: tuple[str, int] | None = None
    """(kind, k): when the workload aborts it (ABORT_KINDS); None: it runs to its end."""
    stream: bool = False
    """LLMEngine.add_request's stream: a CUMULATIVE request's text decoded as its tokens arrive."""


@dataclass
class Workload:
    settings: dict
    """LLM keyword arguments (the model folder aside)."""
    arrivals: list[Arrival] = field(default_factory=list)
    clock_seed: int = 0
    """Seed of the engine core's fake clock, which the decode-stall bound reads (runs stay deterministic)."""
    model: str = "qwen3"
    """Which tiny checkpoint (tests/conftest.py's TINY_MODELS) it runs on."""


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))


def random_settings(rng: random.Random) -> dict:
    """Engine settings: mostly tight, sometimes roomy."""
    block_size = rng.choice([1, 2, 4, 4, 8, 16, 16, 3, 5, 32, 64])
    max_model_len = rng.choice([64, 128, 256, 512])
    min_blocks = -(-max_model_len // block_size)
    tight = rng.random() < 0.8
    num_blocks = min_blocks + (_log_uniform(rng, 1, max(min_blocks // 2, 1)) - 1 if tight else 4 * min_blocks)
    chunked = rng.random() < 0.8
    budget = _log_uniform(rng, 1, 600) if chunked else rng.randint(max_model_len // 2, 2 * max_model_len)
    settings = dict(
        dtype="float32",
        block_size=block_size,
        max_model_len=max_model_len,
        num_kv_blocks=num_blocks,
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        max_num_seqs=rng.choice([1, 2, 3, 4, 8, 16, 64]),
        enable_prefix_caching=rng.random() < 0.7,
        async_scheduling=rng.random() < 0.6,
        scheduling_policy=rng.choice(["fcfs", "fcfs", "priority"]),
        max_num_partial_prefills=rng.choice([1, 1, 2, 3]),
        long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, 200)]),
        max_decode_stall=rng.choice([0, 0, 1.5, 3.0]),
    )
    if rng.random() < 0.25:  # greedy and seeded requests keep their exact tokens under speculation
        k, longest = rng.randint(1, 5), rng.randint(1, 4)
        settings["speculative_config"] = dict(
            method="ngram", num_speculative_tokens=k, prompt_lookup_max=longest, prompt_lookup_min=1, adaptive=False
        )
    if settings["enable_prefix_caching"] and rng.random() < 0.4:
        block_bytes = 2 * 2 * 2 * 32 * 4 * block_size  # layers, k and v, KV heads, head_dim, float32: tiny qwen3
        settings["kv_offloading_size"] = rng.randint(2, 3 * num_blocks) * block_bytes / 2**30
        settings["preemption_mode"] = rng.choice(["recompute", "swap"])
    return settings


def random_params(rng: random.Random, room: int) -> dict:
    """SamplingParams keyword arguments of one request with at most `room` output tokens."""
    params: dict = dict(max_tokens=rng.randint(1, min(40, room)) if room > 40 or rng.random() < 0.7 else None)
    if rng.random() < 0.5:
        params |= dict(temperature=0.0)
    else:
        params |= dict(temperature=1.0, seed=rng.randrange(1 << 20))
        if rng.random() < 0.3:
            params["top_k"] = rng.choice([5, 40])
    params["n"] = rng.choice([1, 1, 1, 2, 3])
    params["ignore_eos"] = rng.random() < 0.5
    if rng.random() < 0.3:
        params["stop_token_ids"] = rng.sample(range(VOCAB_LO, VOCAB_HI), rng.randint(1, 40))
    if rng.random() < 0.2:
        params["stop"] = rng.sample(STOP_STRINGS, rng.randint(1, 2))
    if rng.random() < 0.25:
        params["min_tokens"] = rng.randint(0, params["max_tokens"] or room)
    if rng.random() < 0.3:
        params["logprobs"] = rng.randint(0, 4)
    if rng.random() < 0.15:
        params["prompt_logprobs"] = rng.randint(0, 3)
    if rng.random() < 0.08:
        params["repetition_penalty"] = 1.3  # the host reads the history: the step in flight is collected first
    if rng.random() < 0.4:
        params["output_kind"] = rng.choice(["delta", "final_only"])
    return params


def random_prompts(rng: random.Random, count: int, max_len: int) -> list[list[int]]:
    """Prompts of 1 to `max_len` tokens; most start with one of a few shared prefixes cut at random lengths."""
    prefixes = [[rng.randrange(VOCAB_LO, VOCAB_HI) for _ in range(rng.randint(1, max_len))] for _ in range(3)]
    prompts: list[list[int]] = []
    for _ in range(count):
        if prompts and rng.random() < 0.1:
            prompts.append(list(rng.choice(prompts)))  # the very same prompt again
            continue
        head: list[int] = []
        if rng.random() < 0.7:
            prefix = rng.choice(prefixes)
            head = prefix[: rng.choice([len(prefix), rng.randint(1, len(prefix)), 16, 32, 64])]
        tail = [rng.randrange(VOCAB_LO, VOCAB_HI) for _ in range(_log_uniform(rng, 1, max_len) - 1)]
        prompts.append((head + tail)[:max_len] or [rng.randrange(VOCAB_LO, VOCAB_HI)])
    return prompts


def random_workload(seed: int) -> Workload:
    """The workload of `seed`: settings, then 1 to 20 requests that fit them, and the model to run them on."""
    rng = random.Random(seed)
    settings = random_settings(rng)
    max_model_len = settings["max_model_len"]
    count = rng.randint(1, 20)
    arrivals = []
    longest = min(max_model_len - 1, 300)
    if not settings["enable_chunked_prefill"]:  # a prompt must then fit one step
        longest = min(longest, settings["max_num_batched_tokens"])
    for i, prompt in enumerate(random_prompts(rng, count, longest)):
        params = random_params(rng, max_model_len - len(prompt))
        abort = None
        if rng.random() < 0.25:
            kind = rng.choice(ABORT_KINDS + ("preempted",))  # the rarest to come true: asked for more often
            abort = (kind, rng.randint(0, 30) if kind == "step" else rng.randint(1, 20) if kind == "tokens" else 0)
        step = 0 if rng.random() < 0.5 else rng.randint(1, 40)
        stream = rng.random() < 0.3
        arrivals.append(Arrival(f"r{i}", prompt, params, step, rng.randint(0, 3), abort, stream))
    return Workload(settings, arrivals, clock_seed=seed, model=rng.choice(MODELS))
