#!/usr/bin/env bash
# The fused MoE routing (one Triton launch for softmax + top-k + renormalization, one for the sum over k)
# on one H200 in <= 150 s; everything lands in $OUT/moe_routing.tgz.
#   bash scripts/device/moe_routing_h200.sh
# Parts, in this order, each capped by its limit and by what is left of BUDGET (skipped under 15 s):
#   1. decode    benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile
#                (target: <= 3.0 ms/step at batch 1; was 4.29). The top kernels of each decode graph
#                go to summary.txt: the torch routing kernels (softmax, gatherTopK, bitonicSort, the
#                sum and division) and the bf16 reduce_kernel should be gone, _softmax_topk_kernel and
#                _sum_over_k_kernel in their place.
#   2. tests     tests/gpu/test_families_gpu.py -k "moe or mixtral or fused": bf16 against transformers
#                for Qwen3-MoE and Mixtral, CUDA graphs against eager, the fused kernel against the loop,
#                the compiled routing kernel against the torch ops.
#   3. routing   benchmarks/moe_kernels.py --routing at 1 and 64 tokens (Qwen3-30B-A3B's experts): routing
#                and the sum over k, torch against the kernels, GPU us per layer from graph replays.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives moe_routing.tgz}"
W=${W:-/tmp/moe_routing_h200}
BUDGET=${BUDGET:-150}
rm -rf "$W" && mkdir -p "$W"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:${PYTHONPATH:-}" TRITON_CACHE_DIR="$W/triton_cache"
git log --oneline -1 > "$W/commit.txt" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$W/gpu.txt" 2>&1 || true

log() { echo "[$SECONDS s] $*" | tee -a "$W/summary.txt"; }
part() {  # part NAME SECONDS COMMAND...: capped by what is left of BUDGET, skipped under 15 s
  local name=$1 limit=$2 room=$((BUDGET - SECONDS))
  shift 2
  if [ "$room" -lt 15 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout -k 5 "$limit" "$@" > "$W/$name.log" 2>&1
  log "$name exit $? ($limit s allowed)"
}

part decode 85 python3 benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile \
  --output "$W/decode_qwen3_30b_a3b.json"
part tests 50 python3 -m pytest -q -p no:cacheprovider --durations=8 --junitxml="$W/gpu_tests.xml" \
  tests/gpu/test_families_gpu.py -k "moe or mixtral or fused"
part routing 25 python3 benchmarks/moe_kernels.py --routing --models qwen3-30b-a3b --tokens 1 64 \
  --output "$W/moe_kernels.json"
grep -hE "ms/step|passed|failed|error" "$W/decode.log" "$W/tests.log" 2>/dev/null | tail -6 >> "$W/summary.txt"
grep -hE "routing torch" "$W/routing.log" >> "$W/summary.txt" 2>/dev/null
python3 - "$W" >> "$W/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

path = Path(sys.argv[1]) / "decode_qwen3_30b_a3b.json"
if path.exists():
    for graph, kernels in json.loads(path.read_text()).get("kernels", {}).items():
        print(f"  {graph}: top kernels, us per replay (calls)")
        for k in kernels[:14]:
            print(f"    {k['us_per_replay']:8.1f} ({k['calls_per_replay']:5.1f})  {k['kernel'][:80]}")
PY
tar czf "$OUT/moe_routing.tgz" -C "$W" --exclude triton_cache .
log "packed $OUT/moe_routing.tgz"
cat "$W/summary.txt"
