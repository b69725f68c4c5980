#!/usr/bin/env bash
# [kernels] offline throughput target on one H200 (<= ~4 min): nano-vllm's workload (256 requests) on
# Llama-3.1-8B's config, dummy weights: bf16, fp8 weights + fp8 KV cache (target >= 1.15x bf16) and
# rtn-int4 (target >= 1.0x), one after another in one call. FP8_SWEEP=1 instead sweeps the fp8 cache's decode
# tiles (attention_kernels.py --fp8-sweep) and runs fp8 + fp8 KV with the default tiles, bf16, and fp8 + fp8 KV
# with the sweep's best ($MOPT_ATTENTION_FP8_TILES). ONE tarball, $OUT/throughput_quant.tgz.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
MODEL=${MODEL:-llama-3.1-8b}
run() {  # run NAME ARGS...: one throughput run under a limit
  local name=$1
  shift
  part "throughput_$name" 100 python3 benchmarks/throughput.py --model "$MODEL" --hf-requests 0 "$@" \
    --output "$RES/throughput_${MODEL}_$name.json"
  grep -E "^ours" "$RES/throughput_$name.log" | sed "s/^/$name /" >> "$RES/summary.txt"
}
if [ "${FP8_SWEEP:-0}" = 1 ]; then  # the fp8 cache's decode tiles swept, then fp8 + fp8 KV with the best of them
  part fp8_sweep 120 python3 benchmarks/attention_kernels.py --fp8-sweep --output "$RES/attention_fp8_sweep_h200.json"
  grep -E "^fp8|^best" "$RES/fp8_sweep.log" >> "$RES/summary.txt"
  BEST=$(sed -n 's/^best fp8 decode tiles: \([0-9,]*\).*/\1/p' "$RES/fp8_sweep.log")
  run fp8_fp8kv --quantization fp8 --kv-cache-dtype fp8
  run bf16
  if [ -n "$BEST" ]; then
    export MOPT_ATTENTION_FP8_TILES=$BEST
    run fp8_fp8kv_swept --quantization fp8 --kv-cache-dtype fp8
    unset MOPT_ATTENTION_FP8_TILES
  fi
else
  run bf16
  run fp8_fp8kv --quantization fp8 --kv-cache-dtype fp8
  run int4 --quantization rtn-int4
fi
cat "$RES/summary.txt"
tar -czf "$OUT/throughput_quant.tgz" -C "$RES" .
echo "wrote $OUT/throughput_quant.tgz"
