"""Weight offload: decode step time with N GiB of weights in host memory against its bound.

    PYTHONPATH=. python3 benchmarks/offload.py [--model llama-3.1-8b] [--offload-gb 8] [--output FILE]

For a config of benchmarks/configs (dummy bf16 weights, CUDA graphs on), batch 1 and 32 at context 512:
the median time between consecutive engine steps in steady decoding without offload, then with
`--offload-gb` GiB offloaded. The bound is what a step cannot beat if copies did not overlap compute:
the on-GPU step (the run without offload) plus offloaded bytes / host-to-device bandwidth, the
bandwidth measured in the same run (page-locked buffer, as the engine's). `vs_bound` below 1 means the
copies hid behind compute; the issue's target is at most 1.25. `overlap_floor_ms` (the larger of the two
parts) is what perfect overlap would give. Tokens per second at each batch are reported beside them.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from common import CONFIGS, RESULTS, environment, write_json

CONTEXT = 512
DECODE_STEPS = 24


def h2d_gbps(num_bytes: int = 1 << 30, repeats: int = 10) -> float:
    """Host-to-device copy from page-locked memory registered as the engine registers it."""
    import torch

    host = torch.empty(num_bytes, dtype=torch.uint8)
    torch.cuda.cudart().cudaHostRegister(host.data_ptr(), num_bytes, 0)
    dev = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(repeats + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
    return num_bytes / statistics.median(times) / 1e9


def step_ms(llm, batch: int, tag: str) -> float:
    """Median time between engine steps once every request of `batch` decodes."""
    from model_optimizer import SamplingParams

    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=DECODE_STEPS, detokenize=False)
    engine = llm.engine
    for i in range(batch):
        engine.add_request(f"{tag}-{batch}-{i}", [(i * 7 + j) % 1000 + 1 for j in range(CONTEXT)], params)
    marks = []
    while engine.has_unfinished_requests():
        outs = engine.step()
        if len(outs) == batch and all(len(o.outputs[0].token_ids) > 2 for o in outs):
            marks.append(time.perf_counter())
    times = [b - a for a, b in zip(marks, marks[1:])]
    return statistics.median(times[1:]) * 1e3 if len(times) > 2 else float("nan")


def run(model: str, offload_gb: float, batches: list[int], save=lambda rows: None) -> dict:
    import torch

    from model_optimizer import LLM

    kwargs = dict(load_format="dummy", dtype="bfloat16", max_model_len=CONTEXT + DECODE_STEPS + 8)
    kwargs |= dict(max_num_seqs=max(batches), gpu_memory_utilization=0.45)
    rows: dict[str, dict] = {}
    for gib in (0.0, offload_gb):
        llm = LLM(str(CONFIGS / model), cpu_offload_gb=gib, **kwargs)
        offload = getattr(llm.runner.model, "weight_offload", None)
        rows[str(gib)] = {
            "cpu_offload_gb": gib,
            "offloaded_bytes": offload.host_bytes if offload else 0,
            "offloaded_layers": offload.layer_ids if offload else [],
            "slot_bytes": offload.device_bytes if offload else 0,
            "num_kv_blocks": llm.runner.num_kv_blocks,
            "ms_per_step": {b: step_ms(llm, b, f"{gib}") for b in batches},
        }
        print(f"offload {gib} GiB: {rows[str(gib)]['ms_per_step']}", flush=True)
        save(rows)  # a timeout later keeps what finished
        del llm, offload
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-8b", help="a folder of benchmarks/configs")
    parser.add_argument("--offload-gb", type=float, default=8.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--output", default=str(RESULTS / "offload_h200.json"))
    args = parser.parse_args()
    bandwidth = h2d_gbps()
    print(f"host-to-device {bandwidth:.1f} GB/s", flush=True)
    doc = {"environment": environment(), "model": args.model, "context": CONTEXT, "h2d_gbps": bandwidth}
    rows = run(args.model, args.offload_gb, args.batches, lambda rows: write_json(args.output, doc | {"runs": rows}))
    plain, offloaded = rows["0.0"], rows[str(args.offload_gb)]
    copy_ms = offloaded["offloaded_bytes"] / (bandwidth * 1e9) * 1e3
    results = []
    for b in args.batches:
        base, measured = plain["ms_per_step"][b], offloaded["ms_per_step"][b]
        results.append(
            {
                "batch": b,
                "ms_per_step_plain": base,
                "ms_per_step_offload": measured,
                "copy_ms": copy_ms,
                "bound_ms": base + copy_ms,
                "overlap_floor_ms": max(base, copy_ms),
                "vs_bound": measured / (base + copy_ms),
                "tokens_per_s_plain": b / base * 1e3,
                "tokens_per_s_offload": b / measured * 1e3,
            }
        )
        print(f"batch {b}: {measured:.1f} ms/step with offload, bound {base + copy_ms:.1f} ms", flush=True)
    write_json(args.output, doc | {"runs": rows, "results": results})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
