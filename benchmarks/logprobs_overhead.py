"""Host cost of `logprobs: K` per generated token, in the engine core and in a serving frontend, on the CPU.

    PYTHONPATH=. python3 benchmarks/logprobs_overhead.py [--batch 256] [--steps 128] [--logprobs 5]
        [--rounds 3] [--output FILE]

What `mopt serve` does per token beside the model, with and without logprobs, without the model, the
network or asyncio (so the figures move little on a shared machine; CPU time of this process, best of
--rounds; start-up objects frozen out of the garbage collector's walks, as `mopt serve` does):

- core: `batch` requests decode `steps` tokens through the real EngineCore (scheduler, block pool,
  the runner's `Sampler.results` over host copies of the sampled ids and top-k, the rows of each
  CoreOutputs, its msgpack encoding). Only the forward pass is left out: a runner without a model
  hands out random ids and random sorted top-k, as the device would have copied them to the host.
- frontend: the core's encoded messages replayed through what a frontend does with them (decode, the
  output processor: incremental detokenizing with the word tokenizer of benchmarks/word_tokenizer_model.py
  over Qwen3's 151,936 words) and the SSE event of every stream chunk, `/v1/completions` and
  `/v1/chat/completions` shapes (`process_us` and `chunk_us` per token, and their sum).

`extra_us` is what logprobs add per token; `ratio_*` is the per-token cost without logprobs over the cost with them: what a host-bound server's
throughput with logprobs would be, as a fraction of without, were that work all it did.
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from common import CONFIGS, RESULTS, environment, write_json

VOCAB = 151936  # Qwen3's


class NoModelRunner:
    """A StepRunner without a model: each sampling request gets a random id and, when it asks, a random
    top-k sorted as torch.topk leaves it; `collect` is the real runner's Sampler.results over them."""

    def __init__(self, max_rows: int, k: int, seed: int = 0) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.k = k
        self.params: dict[str, Any] = {}
        self.pool = 64  # distinct steps of random values, reused in turn
        self.ids = torch.randint(3, VOCAB, (self.pool, max_rows), generator=gen)
        top = torch.randn(self.pool, max_rows, max(k, 1), generator=gen).sort(dim=-1, descending=True).values - 3
        self.top_values = top[..., :k].float()
        self.top_ids = torch.randint(3, VOCAB, (self.pool, max_rows, k), generator=gen)
        self.chosen = top[..., 0].float() - 0.5
        self.rank = torch.randint(1, 50, (self.pool, max_rows), generator=gen)
        self.num_launched = 0

    def launch(self, scheduler_output: Any, pending: Any | None) -> tuple[list[str], int]:
        for new in scheduler_output.new_requests:
            self.params[new.request_id] = new.params
        ids = [r for r in scheduler_output.num_scheduled_tokens if r in scheduler_output.sampling_request_ids]
        self.num_launched += 1
        return ids, self.num_launched % self.pool

    def collect(self, handle: tuple[list[str], int]) -> dict:
        from model_optimizer.runtime.layers.sampler import SampledLogprobs, Sampler, SamplingInput

        request_ids, step = handle
        n = len(request_ids)
        batch = [SamplingInput(self.params[r], [], []) for r in request_ids]
        logprobs = None
        if any(b.params.logprobs is not None for b in batch):
            logprobs = SampledLogprobs(
                self.chosen[step, :n], self.rank[step, :n], self.top_values[step, :n], self.top_ids[step, :n]
            )
        results = Sampler.results(self.ids[step, :n].tolist(), logprobs, batch)
        return dict(zip(request_ids, results))


def run_core(batch: int, steps: int, k: int | None, prompt_len: int) -> tuple[float, list[bytes]]:
    """CPU seconds of the core's decode steps (prefill excluded) and every step's encoded CoreOutputs."""
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.engine.core import EngineCore, ModelInfo
    from model_optimizer.runtime.engine.messages import CoreRequest, encode
    from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams

    config = EngineConfig(max_num_seqs=batch, max_num_batched_tokens=batch * prompt_len, enable_prefix_caching=False)
    blocks = batch * -(-(prompt_len + steps + 1) // config.block_size) + 16
    info = ModelInfo(VOCAB, prompt_len + steps + 16, frozenset({VOCAB + 1}), blocks, device_type="cuda")
    core = EngineCore(config, NoModelRunner(batch, k or 0), info)
    params = SamplingParams(max_tokens=steps, logprobs=k, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    rng = random.Random(0)
    for i in range(batch):
        prompt = [rng.randrange(3, VOCAB) for _ in range(prompt_len)]
        core.add_request(CoreRequest(f"cmpl-{i}", prompt, params, steps))
    messages = [encode(o) for o in core.step()]  # the prefill (and, asynchronously scheduled, nothing yet)
    start = time.process_time()
    while core.has_unfinished_requests():
        messages += [encode(o) for o in core.step()]
    return time.process_time() - start, messages


def run_frontend(messages: list[bytes], tokenizer: Any, k: int | None, api: str, batch: int) -> dict[str, float]:
    """CPU seconds a frontend spends on the messages: decoding and output processing, then the SSE events."""
    from model_optimizer.runtime.engine.messages import decode_outputs
    from model_optimizer.runtime.engine.output_processor import OutputProcessor
    from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams
    from model_optimizer.runtime.server.logprobs import TokenTexts
    from model_optimizer.runtime.server.streaming import SeenChoices

    processor = OutputProcessor(tokenizer)
    params = SamplingParams(max_tokens=10**6, logprobs=k, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    streams = {}
    for i in range(batch):
        request_id = f"cmpl-{i}"
        processor.add_request(request_id, None, [5, 6, 7], params, time.time())
        streams[request_id] = (SeenChoices(), _format(api, k, request_id, TokenTexts(tokenizer)))
    process = chunk = 0.0
    events = 0
    for data in messages:
        t0 = time.process_time()
        outputs, _ = processor.process(decode_outputs(data))
        t1 = time.process_time()
        for output in outputs:
            seen, fmt = streams[output.request_id]
            deltas = seen.deltas(0, output)
            if deltas:
                fmt.chunk(deltas)
                events += 1
        process, chunk = process + t1 - t0, chunk + time.process_time() - t1
    return {"process_s": process, "chunk_s": chunk, "events": events}


def _format(api: str, k: int | None, request_id: str, texts: Any) -> Any:
    if api == "completions":
        from model_optimizer.runtime.server.protocol import CompletionRequest
        from model_optimizer.runtime.server.routes.completions import CompletionFormat

        body = CompletionRequest(model="m", prompt="p", max_tokens=128, stream=True, logprobs=k)
        return CompletionFormat(body, [""], request_id, "m", texts)
    from model_optimizer.runtime.server.chat_format import ChatFormat
    from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest

    body = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "p"}], stream=True, logprobs=k is not None, top_logprobs=k
    )
    return ChatFormat(body, request_id, "m", texts)


def word_tokenizer(folder: Path) -> Any:
    import word_tokenizer_model

    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    if not (folder / "tokenizer.json").is_file():
        word_tokenizer_model.write(CONFIGS / "qwen3-0.6b", folder)
    return load_tokenizer(folder)


def measure(args: argparse.Namespace, tokenizer: Any) -> dict[str, dict]:
    """Per token, without and with logprobs: each round runs both, one after the other (a shared machine's
    load then weighs on both alike), and the fastest round of each figure counts."""
    num_tokens = args.batch * args.steps
    runs: dict[str, list] = {"without": [], "with": []}
    for _ in range(args.rounds):
        for name, k in (("without", None), ("with", args.logprobs)):
            seconds, messages = run_core(args.batch, args.steps, k, args.prompt_len)
            apis = {api: run_frontend(messages, tokenizer, k, api, args.batch) for api in ("completions", "chat")}
            runs[name].append((seconds, apis))
    out = {}
    for name, k in (("without", None), ("with", args.logprobs)):
        result: dict = {"logprobs": k, "core_us": round(min(r[0] for r in runs[name]) / num_tokens * 1e6, 3)}
        for api in ("completions", "chat"):
            process = min(r[1][api]["process_s"] for r in runs[name]) / num_tokens * 1e6
            chunk = min(r[1][api]["chunk_s"] for r in runs[name]) / num_tokens * 1e6
            result[api] = {
                "process_us": round(process, 3),
                "chunk_us": round(chunk, 3),
                "frontend_us": round(process + chunk, 3),
            }
        out[name] = result
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256, help="requests decoding together")
    parser.add_argument("--steps", type=int, default=64, help="tokens each request decodes")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--logprobs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="runs of each; the fastest counts")
    parser.add_argument("--tokenizer-dir", default=None, help="where the word tokenizer is kept (default: a temp dir)")
    parser.add_argument("--output", default=str(RESULTS / "logprobs_overhead_cpu.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = word_tokenizer(Path(args.tokenizer_dir or tmp))
        run_core(8, 2, args.logprobs, args.prompt_len)  # every import done, as a started server has them
        gc.collect()
        gc.freeze()  # as `mopt serve` does after start-up: what a request makes is all the collector walks
        measured = measure(args, tokenizer)
    without, with_ = measured["without"], measured["with"]
    result: dict = {
        "benchmark": "logprobs_overhead",
        "environment": environment(),
        "workload": {k: getattr(args, k) for k in ("batch", "steps", "prompt_len", "logprobs", "rounds")},
        "us_per_token": {"without": without, "with": with_},
        "extra_us": {"core": round(with_["core_us"] - without["core_us"], 3)},
        "ratio_core": round(without["core_us"] / with_["core_us"], 3),
    }
    for api in ("completions", "chat"):
        result["extra_us"][f"{api}_frontend"] = round(with_[api]["frontend_us"] - without[api]["frontend_us"], 3)
        result[f"ratio_{api}_frontend"] = round(without[api]["frontend_us"] / with_[api]["frontend_us"], 3)
    write_json(args.output, result)
    for name, r in (("without", without), ("with", with_)):
        print(
            f"{name} logprobs: core {r['core_us']:.2f} us/token; frontend completions "
            f"{r['completions']['process_us']:.2f} + {r['completions']['chunk_us']:.2f} us/token, chat "
            f"{r['chat']['process_us']:.2f} + {r['chat']['chunk_us']:.2f} us/token"
        )
    print("logprobs' extra us/token:", result["extra_us"])
    print({key: value for key, value in result.items() if key.startswith("ratio")})


if __name__ == "__main__":
    main()
