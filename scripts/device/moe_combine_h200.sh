#!/usr/bin/env bash
# The MoE down GEMM that sums each token's top-k rows itself (no _sum_over_k_kernel launch when every
# expert is local), on one H200 in <= 300 s; everything lands in $OUT/moe_combine.tgz.
#   bash scripts/device/moe_combine_h200.sh
# Parts, in this order, each capped by its limit:
#   1. tests     tests/gpu/test_families_gpu.py -k "moe or mixtral or fused or down_gemm": the sum in the
#                down GEMM bit-equal to the separate launch in a CUDA graph replayed on new routes (1, 5,
#                64 tokens; Qwen3-30B-A3B's and a Mixtral-like shape), the kernel against the loop, bf16
#                Qwen3-MoE and Mixtral against transformers, graphs against eager.
#   2. compile   tests/runtime/kernels/test_moe_compile_sm90.py (the summing GEMM compiles: acq_rel atomic,
#                .cg loads, barrier).
#   3. decode    benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile: ms/step
#                (target <= 3.0 at batch 1; 3.22 before) and the kernels per replay: _sum_over_k_kernel
#                (48 x 1.6 us before) should be gone, _moe_gemm_kernel's time per call barely changed.
#   4. moe       benchmarks/moe_kernels.py --tokens 1 8 64 (Qwen3-30B-A3B's experts): fused_ms (separate
#                sum) against fused_local_ms (sum in the down GEMM), GPU us per layer from graph replays.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives moe_combine.tgz}"
source "$(dirname "$0")/common.sh"
start_run
export TRITON_CACHE_DIR="$RES/triton_cache"

part tests 150 python3 -m pytest -q -p no:cacheprovider --durations=8 --junitxml="$RES/gpu_tests.xml" \
  tests/gpu/test_families_gpu.py -k "moe or mixtral or fused or down_gemm"
part compile 60 python3 -m pytest -q -p no:cacheprovider tests/runtime/kernels/test_moe_compile_sm90.py
part decode 120 python3 benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile \
  --output "$RES/decode_qwen3_30b_a3b_moe_combine_h200.json"
part moe 60 python3 benchmarks/moe_kernels.py --models qwen3-30b-a3b --tokens 1 8 64 \
  --output "$RES/moe_kernels_combine_h200.json"
grep -hE "ms/step" "$RES/decode.log" 2>/dev/null | tail -4 >> "$RES/summary.txt"
grep -hE "all local" "$RES/moe.log" >> "$RES/summary.txt" 2>/dev/null
python3 - "$RES" >> "$RES/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

path = Path(sys.argv[1]) / "decode_qwen3_30b_a3b_moe_combine_h200.json"
if path.exists():
    for graph, kernels in json.loads(path.read_text()).get("kernels", {}).items():
        print(f"  {graph}: top kernels, us per replay (calls)")
        for k in kernels[:14]:
            print(f"    {k['us_per_replay']:8.1f} ({k['calls_per_replay']:5.1f})  {k['kernel'][:80]}")
PY
tar czf "$OUT/moe_combine.tgz" -C "$RES" --exclude triton_cache .
cat "$RES/summary.txt"
