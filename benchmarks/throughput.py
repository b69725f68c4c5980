"""Offline throughput on nano-vllm's workload, ours against transformers' continuous batching.

    PYTHONPATH=. python3 benchmarks/throughput.py [--num-requests 256] [--hf-requests 16] [--hf-timeout 240] [--output FILE]

Workload (exactly nano-vllm's bench.py): 256 requests, prompt token ids uniform in [0, 10000),
prompt and output lengths each uniform in [100, 1024], ignore_eos, temperature 0.6, seed 0,
max_model_len 4096, Qwen3-0.6B's config (or `--model`, a folder of benchmarks/configs) with dummy
bf16 weights. Transformers runs a prefix of the same requests (it is far slower) on the same weights,
in a child process with a time limit so that its run cannot cost ours; both report output tokens per
second (`--hf-requests 0` skips it).
"""

from __future__ import annotations

import argparse
import random
import time

from common import CONFIGS, RESULTS, copy_bandwidth_gbps, environment, log_triton_compiles, write_json


def workload(num_requests: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randint(0, 10000) for _ in range(rng.randint(100, 1024))] for _ in range(num_requests)]
    outputs = [rng.randint(100, 1024) for _ in range(num_requests)]
    return prompts, outputs


def run_ours(prompts, output_lens, args) -> dict:
    from model_optimizer import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(
        str(CONFIGS / args.model),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=4096,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enforce_eager=args.enforce_eager,
        kv_cache_dtype=args.kv_cache_dtype,
        **({"quantization": args.quantization} if args.quantization else {}),
    )
    startup = time.perf_counter() - t0
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=n, detokenize=False) for n in output_lens]
    llm.generate([[1, 2, 3]], SamplingParams(max_tokens=8, detokenize=False))  # warm-up
    steps = record_steps(llm.engine.scheduler)
    compiles = log_triton_compiles()
    runs = []
    for _ in range(args.repeat):  # later runs show the warm engine: no first-shape compiles
        del steps[:]
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params)
        elapsed = time.perf_counter() - t0
        runs.append(
            {
                "seconds": elapsed,
                "step_profile": summarize_steps(steps, t0 + elapsed),
                "triton_compiles": [(round(t - t0, 3), name) for t, name in compiles if t >= t0],
            }
        )
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    for run in runs:
        run["output_tok_per_s"] = generated / run["seconds"]
    stats = llm.engine.stats()
    return {
        "engine": "model_optimizer",
        "requests": len(prompts),
        "output_tokens": generated,
        "seconds": runs[0]["seconds"],
        "output_tok_per_s": runs[0]["output_tok_per_s"],
        "startup_s": startup,
        "num_kv_blocks": stats.num_blocks,
        "preemptions": stats.num_preemptions,
        "steps": stats.num_steps // args.repeat,
        "runs": runs,
        "step_profile": runs[0]["step_profile"],
    }


def record_steps(scheduler) -> list[tuple[float, int, int]]:
    """(time, sequences, tokens) of every scheduled step, appended as the scheduler hands them out."""
    log: list[tuple[float, int, int]] = []
    schedule = scheduler.schedule

    def logged(*args, **kwargs):
        out = schedule(*args, **kwargs)
        log.append((time.perf_counter(), len(out.num_scheduled_tokens), out.total_num_scheduled_tokens))
        return out

    scheduler.schedule = logged
    return log


def summarize_steps(log: list[tuple[float, int, int]], end: float) -> dict:
    """Wall time between consecutive schedules, split into steps with prompt tokens and decode-only steps
    (by batch size): where the run's time goes."""
    groups: dict[str, list[float]] = {}
    for (t, seqs, tokens), (t_next, _, _) in zip(log, [*log[1:], (end, 0, 0)]):
        if tokens == 0:
            continue
        key = "prefill" if tokens > seqs else f"decode {min(256, 64 * -(-seqs // 64))}"  # buckets of 64 sequences
        groups.setdefault(key, []).append(t_next - t)
    summary = {
        k: {"steps": len(v), "seconds": round(sum(v), 3), "ms_per_step": round(sum(v) / len(v) * 1e3, 3)}
        for k, v in sorted(groups.items())
    }
    summary.get("prefill", {})["each_ms"] = [round(x * 1e3, 1) for x in groups.get("prefill", [])]
    return summary


def run_transformers(prompts, output_lens, model: str = "qwen3-0.6b") -> dict:
    """transformers' own continuous batching (generate_batch, sdpa) on dummy weights of the same config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(str(CONFIGS / model))
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-1e-2, 1e-2)
    max_new = max(output_lens)
    gen = GenerationConfig(max_new_tokens=max_new, do_sample=True, temperature=0.6, eos_token_id=-1, pad_token_id=0)
    t0 = time.perf_counter()
    with torch.no_grad():
        result = model.generate_batch(inputs=prompts, generation_config=gen)
    failed = [r.error for r in result.values() if r.error]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed in generate_batch: {failed[0]}")
    elapsed = time.perf_counter() - t0
    generated = sum(len(r.generated_tokens) for r in result.values())
    return {
        "engine": "transformers.generate_batch (sdpa)",
        "requests": len(prompts),
        "output_tokens": generated,
        "seconds": elapsed,
        "output_tok_per_s": generated / elapsed,
        "note": f"one generation config for all: max_new_tokens={max_new}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen3-0.6b", help="a folder of benchmarks/configs")
    parser.add_argument("--num-requests", type=int, default=256)
    parser.add_argument("--hf-requests", type=int, default=16, help="0 skips transformers")
    parser.add_argument("--hf-timeout", type=float, default=240, help="seconds transformers may take")
    parser.add_argument("--only-transformers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=16384)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--quantization", default=None, help="weights quantized at load time: fp8, int8, rtn-int4")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"])
    parser.add_argument(
        "--repeat", type=int, default=1, help="generate this many times on one engine; the first is reported"
    )
    parser.add_argument("--output", default=str(RESULTS / "throughput_h200.json"))
    args = parser.parse_args()
    prompts, output_lens = workload(args.num_requests)
    if args.only_transformers:  # the child process of transformers_in_child
        n = args.hf_requests
        write_json(args.output, run_transformers(prompts[:n], output_lens[:n], args.model))
        return
    result = {
        "benchmark": "offline_throughput",
        "environment": environment(),
        "workload": {
            "num_requests": args.num_requests,
            "prompt_len": [100, 1024],
            "output_len": [100, 1024],
            "token_ids": [0, 10000],
            "temperature": 0.6,
            "ignore_eos": True,
            "seed": 0,
            "max_model_len": 4096,
            "model": f"{args.model} config, dummy bf16 weights",
        },
        "config": vars(args),
        "copy_bandwidth_gbps": copy_bandwidth_gbps(),
    }
    result["ours"] = run_ours(prompts, output_lens, args)
    print(f"ours: {result['ours']['output_tok_per_s']:.0f} output tok/s", flush=True)
    write_json(args.output, result)
    if args.hf_requests:
        result["transformers"] = transformers_in_child(args)
        print(f"transformers: {result['transformers']}", flush=True)
    write_json(args.output, result)


def transformers_in_child(args) -> dict:
    """transformers' figure from a child process, or why there is none (error, time limit)."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/hf.json"
        command = [
            sys.executable,
            __file__,
            "--only-transformers",
            "--hf-requests",
            str(args.hf_requests),
            "--output",
            path,
            "--model",
            args.model,
        ]
        try:
            done = subprocess.run(command, timeout=args.hf_timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {args.hf_timeout} s"}
        if done.returncode != 0:
            return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
        with open(path) as f:
            return json.load(f)


if __name__ == "__main__":
    main()
