#!/usr/bin/env bash
# [kernels] offline throughput target on one H200 (<= ~4 min): nano-vllm's workload (256 requests) on
# Llama-3.1-8B's config, dummy weights: bf16, fp8 weights + fp8 KV cache (target >= 1.15x bf16) and
# rtn-int4 (target >= 1.0x), one after another in one call. ONE tarball, $OUT/throughput_quant.tgz.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
MODEL=${MODEL:-llama-3.1-8b}
run() {  # run NAME ARGS...: one throughput run under a limit
  local name=$1
  shift
  part "throughput_$name" 110 python3 benchmarks/throughput.py --model "$MODEL" --hf-requests 0 "$@" \
    --output "$RES/throughput_${MODEL}_$name.json"
  grep -E "^ours" "$RES/throughput_$name.log" | sed "s/^/$name /" >> "$RES/summary.txt"
}
run bf16
run fp8_fp8kv --quantization fp8 --kv-cache-dtype fp8
run int4 --quantization rtn-int4
cat "$RES/summary.txt"
tar -czf "$OUT/throughput_quant.tgz" -C "$RES" .
echo "wrote $OUT/throughput_quant.tgz"
