#!/usr/bin/env bash
# int4 decode tiles with the split that leaves just under two programs an SM, and the served int8-w8a8 grid,
# on one H200, one tarball $OUT/int4_splits.tgz. From the repository root on the GPU machine:
#   bash scripts/device/int4_splits_h200.sh
# Parts:
#   1. sweep   benchmarks/quant_kernels.py --sweep --kinds int4 at 1..16 rows (Llama-3.1-8B and Qwen3-0.6B
#              shapes), merged over a copy of the packaged table (quant_tiles.json: commit it)
#   2. decode  benchmarks/decode_latency.py, Llama-3.1-8B rtn-int4 at batch 1 / 8 / 16 with the packaged
#              table, then bf16 and rtn-int4 with the merged one
#   3. tests   the int4 tests of tests/gpu/test_quant_kernels_gpu.py with the merged table
#   4. tune    scripts/device/tune_h200.sh quant over null and int8-w8a8 (64 clients, 192 requests)
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
cp model_optimizer/runtime/kernels/quant_tiles.json "$RES/quant_tiles.json"
part sweep 300 python3 benchmarks/quant_kernels.py --sweep --kinds int4 --m 1 2 4 8 16 --methods bf16 int4 \
  --tiles-output "$RES/int4_tiles.json" --merge-into "$RES/quant_tiles.json" --output "$RES/quant_kernels_int4.json"
part decode_packaged 200 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization rtn-int4 \
  --batch-sizes 1 8 16 --output "$RES/decode_int4_packaged.json"
part decode_merged 240 env MOPT_QUANT_TILES="$RES/quant_tiles.json" python3 benchmarks/decode_latency.py \
  --models llama-3.1-8b --quantization none rtn-int4 --batch-sizes 1 8 16 --output "$RES/decode_int4_merged.json"
part tests 200 env MOPT_QUANT_TILES="$RES/quant_tiles.json" python3 -m pytest -q -p no:cacheprovider \
  --junitxml="$RES/gpu_tests_int4.xml" tests/gpu/test_quant_kernels_gpu.py -k int4
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
if [ -z "${NO_TUNE:-}" ]; then
  QUANT_FORMATS="null, int8-w8a8" QUANT_CONCURRENCY=64 QUANT_REQUESTS=192 OUT=/tmp/tuneout timeout 420 \
    bash scripts/device/tune_h200.sh quant > "$RES/tune_quant.log" 2>&1
  mkdir -p "$RES/tune"
  cp /tmp/tuneout/quant/results.json /tmp/tuneout/quant.log /tmp/tuneout/quant/report.html "$RES/tune/" 2>/dev/null
fi
tar -czf "$OUT/int4_splits.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"; tail -12 "$RES/tune_quant.log" 2>/dev/null
