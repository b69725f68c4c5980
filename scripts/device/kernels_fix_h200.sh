#!/usr/bin/env bash
# Verifies the kernels-fix branch on one H200 in ~150 s; everything lands in $OUT/kernels_fix.tgz.
#   bash scripts/device/kernels_fix_h200.sh
# The packaged table (model_optimizer/runtime/kernels/quant_tiles.json, run 1's measurements with the
# new "capture" entries) is what every part reads; no sweep. Parts, each under its own timeout:
#   1. tests   the GPU quant tests the H200 run failed plus the new capture ones (int4 yardstick,
#              fp8 row quantization, dequant inside and outside a capture, 128/256-row graphs).
#   2. decode  benchmarks/decode_latency.py, Llama-3.1-8B rtn-int4 and int8 at batch 1 / 128 / 256: the
#              capture that crashed (graphs up to 256 rows where the table says dequant).
#   3. linears benchmarks/quant_kernels.py, Qwen3-0.6B int4 / int8 / fp8 / bf16 at M = 64, 128, 256:
#              per-step linear ms from CUDA-graph replays (a call that cannot be captured is an error row).
set -uo pipefail
: "${OUT:?set OUT to the folder that receives kernels_fix.tgz}"
W=${W:-/tmp/kernels_fix_h200}
BUDGET=${BUDGET:-170}
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 TRITON_DEFAULT_FP_FUSION=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}" TRITON_CACHE_DIR="$W/triton_cache"
unset MOPT_QUANT_TILES
git log --oneline -1 > "$W/commit.txt" 2>&1 || true

log() { echo "[$SECONDS s] $*" | tee -a "$W/parts.txt"; }
part() {  # part NAME SECONDS COMMAND...: capped by what is left of BUDGET, skipped under 15 s
  local name=$1 limit=$2 room=$((BUDGET - SECONDS))
  shift 2
  if [ "$room" -lt 15 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  log "$name exit $? ($limit s allowed)"
}

part tests 70 python3 -m pytest -q -p no:cacheprovider --junitxml="$W/gpu_tests.xml" tests/gpu/test_quant_kernels_gpu.py \
  -k "split_k or quantize_rows or dequant_backend or large_decode"
part decode 55 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization rtn-int4 int8 \
  --batch-sizes 1 128 256 --output "$W/decode_llama.json"
part linears 35 python3 benchmarks/quant_kernels.py --models qwen3-0.6b --methods bf16 fp8 int8 int4 \
  --m 64 128 256 --output "$W/quant_kernels.json"
grep -E "passed|failed|error" "$W/tests.log" | tail -3 >> "$W/parts.txt"
python3 - "$W" >> "$W/parts.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

w = Path(sys.argv[1])
if (w / "decode_llama.json").exists():
    for r in json.loads((w / "decode_llama.json").read_text()).get("rows", []):
        print(f"  decode {r['model']} {r.get('quantization')} batch {r['batch']}: {r['ms_per_step']:.3f} ms/step")
if (w / "quant_kernels.json").exists():
    data = json.loads((w / "quant_kernels.json").read_text())
    for r in data.get("rows", []):
        if "error" in r:
            print(f"  linear ERROR {r['method']} {r['n']}x{r['k']} M={r['m']}: {r['error'][:160]}")
    for model, steps in data.get("per_step", {}).items():
        for r in steps:
            print(f"  {model} {r['method']:6s} M={r['m']:<4d} {r['ms_per_step']:7.3f} ms linears/step")
PY
tar czf "$OUT/kernels_fix.tgz" -C "$W" --exclude triton_cache .
log "packed $OUT/kernels_fix.tgz"
cat "$W/parts.txt"
