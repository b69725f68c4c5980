"""Decode step time against the memory-bandwidth limit (gpt-fast style).

    PYTHONPATH=. python3 benchmarks/decode_latency.py [--output FILE]

For Qwen3-0.6B's and Llama-3.1-8B's configs (dummy bf16 weights; `--models` takes any folder of
benchmarks/configs, qwen3-30b-a3b say), batch 1, 8 and 64 at context 512: the median time between
consecutive engine steps in steady decoding (scheduling, CUDA-graph replay, sampling: what a user
waits for per token; with asynchronous scheduling the host work of one step overlaps the device
work of the previous one), bytes that step must read (weights once, of a mixture of experts only
the experts its tokens are routed to, plus each sequence's KV cache: DeepSeek's latent rows, with what
full heads would take beside them), and the achieved GB/s against
a device-to-device copy measured in the same run. `graph_ms` is the forward pass alone (CUDA-graph
replays timed with CUDA events in the middle of the decode, while the graph's buffers hold the full
batch), so `ms_per_step - graph_ms` is what logits, sampling and host work still add.

`--quantization fp8 int8 rtn-int4` repeats the measurement per method, the dummy weights quantized
at load time (rtn-int4 runs the same W4A16 kernels as awq); `none` is the bf16 baseline. Weight
bytes then count the quantized tensors (qweight, scales, zeros) as stored.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import CONFIGS, RESULTS, copy_bandwidth_gbps, environment, write_json

CONTEXT = 512
DECODE_STEPS = 64


def measure(
    model: str,
    batch_sizes: list[int],
    profile: bool = False,
    kernels: dict | None = None,
    quantization: str | None = None,
    decode_steps: int = DECODE_STEPS,
) -> list[dict]:
    from model_optimizer import LLM, SamplingParams

    extra = {} if quantization in (None, "none") else {"quantization": quantization}
    llm = LLM(
        str(CONFIGS / model),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=CONTEXT + decode_steps + 8,
        max_num_seqs=max(batch_sizes),
        gpu_memory_utilization=0.8,
        **extra,
    )
    method = quantization or "none"
    kv_bytes_per_token = llm.runner.bytes_per_block() // llm.runner.config.block_size  # the engine's own cache
    mla = getattr(llm.runner.model, "mla", None)  # a latent row per token: what full heads would take beside it
    full_heads = llm.runner.args.num_layers * mla.full_head_elements() * 2 if mla else None
    rows = []
    engine = llm.engine
    for batch in batch_sizes:
        params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=decode_steps, detokenize=False)
        for i in range(batch):
            engine.add_request(
                f"{model}-{method}-{batch}-{i}", [(i * 7 + j) % 1000 + 1 for j in range(CONTEXT)], params
            )
        marks: list[float] = []
        graph_ms, graph_kernels, measured = float("nan"), None, False
        while engine.has_unfinished_requests():
            outs = engine.step()
            if len(outs) == batch and all(len(o.outputs[0].token_ids) > 2 for o in outs):
                marks.append(time.perf_counter())  # steady decoding: every request got a token
                if len(marks) == 12 and not measured:  # the graph's buffers hold a full batch now
                    graph_ms = replay_ms(llm.runner, batch)
                    graph_kernels = replay_kernels(llm.runner, batch) if profile else None
                    marks.clear()  # the replays above are not decode steps
                    measured = True
        times = [b - a for a, b in zip(marks, marks[1:])]
        step = statistics.median(times[2:]) if len(times) > 4 else float("nan")
        moved = weight_bytes_read(llm.runner.model, batch) + batch * (CONTEXT + decode_steps // 2) * kv_bytes_per_token
        if graph_kernels is not None:
            kernels[f"{model} {method} batch {batch}" if extra else f"{model} batch {batch}"] = graph_kernels
        rows.append(
            {
                "model": model,
                "quantization": method,
                "batch": batch,
                "context": CONTEXT,
                "ms_per_step": step * 1e3,
                "graph_ms": graph_ms,
                "tokens_per_s": batch / step,
                "bytes_per_step": moved,
                "kv_bytes_per_token": kv_bytes_per_token,
                "full_head_kv_bytes_per_token": full_heads,
                "achieved_gbps": moved / step / 1e9,
                "decode_steps_timed": len(times),
            }
        )
        print(
            f"{model} {method} batch {batch}: {step * 1e3:.3f} ms/step (forward {graph_ms:.3f} ms), "
            f"{moved / step / 1e9:.0f} GB/s",
            flush=True,
        )
    return rows


def model_weight_bytes(model) -> int:
    """Bytes of the parameters plus the quantized tensors that replace them (buffers, not parameters)."""
    quantized = sum(
        b.numel() * b.element_size()
        for name, b in model.named_buffers()
        if name.rsplit(".", 1)[-1] in ("qweight", "scales", "zeros")
    )
    return sum(p.numel() * p.element_size() for p in model.parameters()) + quantized


def weight_bytes_read(model, batch: int) -> float:
    """Weight bytes a decode step of `batch` sequences reads: every weight of a dense model; of a mixture
    of experts' experts, those its tokens are routed to, expected under uniform routing (as dummy
    weights route: each expert is missed by a token with probability 1 - top_k / num_experts)."""
    from model_optimizer.runtime.layers.moe import FusedExperts, TopKRouter

    total = float(model_weight_bytes(model))
    experts = [m for m in model.modules() if isinstance(m, FusedExperts)]
    routers = [m for m in model.modules() if isinstance(m, TopKRouter)]
    for layer, router in zip(experts, routers):
        stored = sum(p.numel() * p.element_size() for p in layer.parameters())
        total -= stored * (1 - router.top_k / router.num_experts) ** batch
    return total


def replay_ms(runner, batch: int, replays: int = 50) -> float:
    """Median time of one replay of the decode graph holding `batch` sequences (the buffers hold the last step)."""
    import torch

    from model_optimizer.runtime.runner.decode_runner import bucket_for

    graphs = runner.decode_runner
    if graphs is None or not graphs.graphs:
        return float("nan")
    graph = graphs.graphs[bucket_for(batch, graphs.sizes)]
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def replay_kernels(runner, batch: int, replays: int = 10) -> list[dict]:
    """GPU kernels of the decode graph for `batch` sequences: name, calls per replay, us per call."""
    import torch

    from model_optimizer.runtime.runner.decode_runner import bucket_for

    graph = runner.decode_runner.graphs[bucket_for(batch, runner.decode_runner.sizes)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    rows = [
        {
            "kernel": e.key[:90],
            "calls_per_replay": e.count / replays,
            "us_per_call": e.device_time / 1.0,
            "us_per_replay": e.device_time_total / replays,
        }
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["us_per_replay"])[:20]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b", "llama-3.1-8b"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--profile", action="store_true", help="add the GPU kernels of each decode graph")
    parser.add_argument(
        "--decode-steps",
        type=int,
        default=DECODE_STEPS,
        help="tokens each request decodes (more: a longer steady run for a host profiler; the context limit grows)",
    )
    parser.add_argument(
        "--quantization",
        nargs="+",
        default=["none"],
        help="weight quantization per run, quantized at load time: none, fp8, int8, rtn-int4",
    )
    parser.add_argument("--output", default=str(RESULTS / "decode_latency_h200.json"))
    args = parser.parse_args()
    bandwidth = copy_bandwidth_gbps()
    result = {
        "benchmark": "decode_latency",
        "environment": environment(),
        "copy_bandwidth_gbps": bandwidth,
        "config": vars(args),
        # the quantized kernels' launch-shape table in force (runtime/kernels/quant_tiles.py); None: the packaged one
        "quant_tiles": os.environ.get("MOPT_QUANT_TILES"),
        "rows": [],
    }
    for model in args.models:
        for quantization in args.quantization:
            result["rows"] += measure(
                model,
                args.batch_sizes,
                args.profile,
                result.setdefault("kernels", {}),
                quantization,
                args.decode_steps,
            )
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
            write_json(args.output, result)
    for row in result["rows"]:
        row["fraction_of_copy_bandwidth"] = row["achieved_gbps"] / bandwidth
    write_json(args.output, result)


if __name__ == "__main__":
    main()
