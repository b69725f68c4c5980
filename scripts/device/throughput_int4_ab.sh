#!/usr/bin/env bash
# Offline throughput (nano-vllm's workload, Llama-3.1-8B dummy weights): bf16 and rtn-int4 with the tile
# table before (out/ab/new.json) and the packaged one, alternated: bf16, int4 now, int4 before, int4 now,
# bf16. Carry "out" and ".whl". Results in $OUT/throughput_int4_ab.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
run() {  # run NAME [TABLE] ARGS...
  local name=$1 table=$2
  shift 2
  part "throughput_$name" 100 env ${table:+MOPT_QUANT_TILES=$table} python3 benchmarks/throughput.py \
    --model llama-3.1-8b --hf-requests 0 "$@" --output "$RES/throughput_$name.json"
  grep -E "^ours" "$RES/throughput_$name.log" | sed "s/^/$name /" >> "$RES/summary.txt"
}
run bf16_1 ""
run int4_now_1 "" --quantization rtn-int4
run int4_before out/ab/new.json --quantization rtn-int4
run int4_now_2 "" --quantization rtn-int4
run bf16_2 ""
tar -czf "$OUT/throughput_int4_ab.tgz" -C "$RES" .
cat "$RES/summary.txt"
