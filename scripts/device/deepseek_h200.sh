#!/usr/bin/env bash
# DeepSeek-V2/V3 (multi-head latent attention) on one H200, everything packed in $OUT/deepseek.tgz.
#
# From the repository root on the GPU machine (about 4 minutes):
#   bash scripts/device/deepseek_h200.sh           # GPU tests, the latent kernel's speed, V2-Lite decode
#   bash scripts/device/deepseek_h200.sh extra     # + the memory plan against the engine's KV blocks (~1 min)
#
# Parts, each under its own time limit (the script goes on when one fails or times out):
#   gpu_tests   tests/gpu/test_mla_gpu.py (the Triton latent kernel against the float32 reference at
#               16 and 128 heads of 512 + 64, mixed batches, decode at batch 1 and 64 with and without
#               split keys, an fp8 cache; CUDA graphs against eager on a tiny V3) and the DeepSeek cases
#               of tests/gpu/test_families_gpu.py (bf16 greedy agreement with transformers on CUDA, tiny
#               V2-Lite / V2 / V3 configs)
#   mla_kernel  benchmarks/mla_attention.py: one layer's decode attention at batch 1 and 64, contexts 512
#               and 4096, latent kernel against full-head paged attention (GB/s against a copy)
#   decode      benchmarks/decode_latency.py: DeepSeek-V2-Lite config, dummy bf16 weights, batch 1 and 64
#               at context 512 (ms/step, forward-only graph ms, KV bytes per token against full heads)
# Each part logs to <part>.log (and writes <part>.json); summary.txt has one line per part.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
MODE=${1:-default}
WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$WORK/gpu.txt" 2>&1 || true
git rev-parse HEAD > "$WORK/commit.txt" 2>/dev/null || true

part() {  # part NAME SECONDS COMMAND...: run with a time limit (SIGTERM, then SIGKILL 15 s later), log, go on
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 15 "$limit" "$@" > "$WORK/$name.log" 2>&1
  echo "[$SECONDS s] $name: exit $? after $((SECONDS - start)) s" | tee -a "$WORK/summary.txt"
}

part gpu_tests 130 python3 -m pytest -q -p no:cacheprovider --durations=8 tests/gpu/test_mla_gpu.py \
  tests/gpu/test_families_gpu.py -k "mla or deepseek"
tail -4 "$WORK/gpu_tests.log" >> "$WORK/summary.txt"
part mla_kernel 40 python3 benchmarks/mla_attention.py --output "$WORK/mla_attention.json"
part decode 130 python3 benchmarks/decode_latency.py --models deepseek-v2-lite --batch-sizes 1 64 \
  --output "$WORK/decode_deepseek_v2_lite.json"
if [ "$MODE" = extra ]; then
  part plan_check 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_memory_plan.py -k deepseek
  tail -3 "$WORK/plan_check.log" >> "$WORK/summary.txt"
fi
grep -hE "batch [0-9]+ context|ms/step|KV cache:|GPU memory" "$WORK/mla_kernel.log" "$WORK/decode.log" \
  >> "$WORK/summary.txt" 2>/dev/null
python3 - "$WORK/decode_deepseek_v2_lite.json" >> "$WORK/summary.txt" 2>/dev/null <<'EOF'
import json, sys
row = json.load(open(sys.argv[1]))["rows"][0]
latent, full = row["kv_bytes_per_token"], row["full_head_kv_bytes_per_token"]
print(f"KV bytes per token: {latent:,} (latent) against {full:,} (full heads): {full / latent:.1f}x smaller")
EOF
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$WORK/summary.txt" 2>&1 || true
cat "$WORK/summary.txt"
tar -czf "$OUT/deepseek.tgz" -C "$WORK" .
