#!/usr/bin/env bash
# The split-KV merge inside the attention launch (no _reduce_splits_kernel) on one H200, in at most 9 min;
# everything lands in $OUT/attn_reduce.tgz. From the repository root on the GPU machine:
#   bash scripts/device/attn_reduce_h200.sh
# Parts, each under its own time limit (the script goes on when one fails or times out):
#   gpu_tests  tests/gpu/test_kernels_gpu.py (split-KV against the reference, the fused merge under a
#              captured graph with 3 replays of new inputs, padded rows zeroed, replays bit-identical,
#              counters back at zero), test_graphs_gpu.py and test_warmup_gpu.py (graphs against eager,
#              the warm-up compiling every attention variant)
#   attention  benchmarks/attention_kernels.py --no-sweep: single pass vs split in do_bench_cudagraph
#   decode     benchmarks/decode_latency.py --profile at batch 1: Qwen3-0.6B, Llama-3.1-8B, Qwen3-30B-A3B
#              (ms/step; _reduce_splits_kernel must be absent from the per-replay kernels)
set -uo pipefail
: "${OUT:?set OUT to the folder that receives attn_reduce.tgz}"
source "$(dirname "$0")/common.sh"
start_run
export TRITON_CACHE_DIR="$RES/triton_cache"

part gpu_tests 180 python3 -m pytest -q -p no:cacheprovider --junitxml="$RES/gpu_tests.xml" \
  tests/gpu/test_kernels_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_warmup_gpu.py
part attention 120 python3 benchmarks/attention_kernels.py --no-sweep --output "$RES/attention_kernels.json"
part decode 240 python3 benchmarks/decode_latency.py --models qwen3-0.6b llama-3.1-8b qwen3-30b-a3b \
  --batch-sizes 1 --profile --output "$RES/decode_latency.json"
python3 - "$RES" >> "$RES/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

res = Path(sys.argv[1])
path = res / "decode_latency.json"
if path.exists():
    data = json.loads(path.read_text())
    for r in data.get("rows", []):
        print(f"  decode {r['model']} batch {r['batch']}: {r['ms_per_step']:.3f} ms/step")
    for name, kernels in (data.get("kernels") or {}).items():
        attn = [k for k in kernels if "attention" in k["kernel"] or "reduce_splits" in k["kernel"]]
        for k in attn:
            print(f"  {name}: {k['kernel'][:40]} {k['calls_per_replay']:.0f} x {k['us_per_call']:.1f} us")
PY
cat "$RES/summary.txt"
tar czf "$OUT/attn_reduce.tgz" -C "$RES" --exclude triton_cache .
echo "packed $OUT/attn_reduce.tgz"
