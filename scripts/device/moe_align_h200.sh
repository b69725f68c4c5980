#!/usr/bin/env bash
# The parallel MoE alignment (kernels/moe_align.py: per-chunk counts, then scatter + padding across
# programs) on one H200 in <= 220 s; everything lands in $OUT/moe_align.tgz.
#   bash scripts/device/moe_align_h200.sh
# Parts, in this order, each capped by its limit and by what is left of BUDGET (skipped under 15 s):
#   1. align     benchmarks/moe_kernels.py --align at 1, 8, 64 and 512 tokens (Qwen3-30B-A3B's 128
#                experts, top-8): one-program kernel, parallel kernels and torch sort, GPU us per layer
#                from graph replays (the one-program kernel was 38.7 us at 64 tokens in the profile).
#   2. tests     tests/gpu/test_families_gpu.py -k "align or fused_moe": the alignment captured in a CUDA
#                graph and replayed on new ids against the sort; the fused kernel against the loop.
#   3. decode    benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile: the
#                top kernels of each graph go to summary.txt (_align_kernel at batch 64 should be
#                replaced by _align_count_kernel + _align_scatter_kernel, a few us each).
set -uo pipefail
: "${OUT:?set OUT to the folder that receives moe_align.tgz}"
W=${W:-/tmp/moe_align_h200}
BUDGET=${BUDGET:-220}
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

part align 90 python3 benchmarks/moe_kernels.py --align --models qwen3-30b-a3b --tokens 1 8 64 512 \
  --output "$W/moe_kernels.json"
part tests 40 python3 -m pytest -q -p no:cacheprovider --durations=8 --junitxml="$W/gpu_tests.xml" \
  tests/gpu/test_families_gpu.py -k "align or fused_moe"
part decode 85 python3 benchmarks/decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile \
  --output "$W/decode_qwen3_30b_a3b.json"
grep -hE "align " "$W/align.log" >> "$W/summary.txt" 2>/dev/null
grep -hE "ms/step|passed|failed|error" "$W/tests.log" "$W/decode.log" 2>/dev/null | tail -6 >> "$W/summary.txt"
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
tar czf "$OUT/moe_align.tgz" -C "$W" --exclude triton_cache .
log "packed $OUT/moe_align.tgz"
cat "$W/summary.txt"
