#!/usr/bin/env bash
# int4 tensor-core tiles with an accumulator per plane (asynchronous MMAs), on one H200, one tarball
# $OUT/int4_async.tgz. From the repository root on the GPU machine:
#   bash scripts/device/int4_async_h200.sh
# Parts:
#   1. sweep   benchmarks/quant_kernels.py --sweep --kinds int4 at 16..256 rows (Llama-3.1-8B and Qwen3-0.6B
#              shapes; every candidate's time is in the JSON), merged over a copy of the packaged table
#   2. decode  benchmarks/decode_latency.py, Llama-3.1-8B at batch 8 / 64 / 256: rtn-int4 with the packaged
#              table, then bf16 and rtn-int4 with the merged one, then rtn-int4 with the packaged one again
#   3. tests   the int4 tests of tests/gpu/test_quant_kernels_gpu.py with the merged table
#   4. row_planes  benchmarks/int4_row_planes.py (an experiment: planes along the rows), Llama-3.1-8B shapes
# SKIP_PARTS="sweep ..." skips parts (a call is at most 10 minutes); TABLE=FILE takes the merged table of an
# earlier call instead of the sweep's.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
BATCHES=${BATCHES:-8 64 256}
cp "${TABLE:-model_optimizer/runtime/kernels/quant_tiles.json}" "$RES/quant_tiles.json"
part sweep ${SWEEP_S:-420} python3 benchmarks/quant_kernels.py --sweep --kinds int4 --m ${SWEEP_M:-16 32 64 128 256} \
  --methods bf16 int4 --tiles-output "$RES/int4_tiles.json" --merge-into "$RES/quant_tiles.json" \
  --output "$RES/quant_kernels_int4.json"
part decode_packaged 200 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization rtn-int4 \
  --batch-sizes $BATCHES --output "$RES/decode_int4_packaged.json"
part decode_merged 300 env MOPT_QUANT_TILES="$RES/quant_tiles.json" python3 benchmarks/decode_latency.py \
  --models llama-3.1-8b --quantization none rtn-int4 --batch-sizes $BATCHES --output "$RES/decode_int4_merged.json"
part decode_packaged2 200 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization rtn-int4 \
  --batch-sizes $BATCHES --output "$RES/decode_int4_packaged2.json"
part tests 240 env MOPT_QUANT_TILES="$RES/quant_tiles.json" python3 -m pytest -q -p no:cacheprovider \
  --junitxml="$RES/gpu_tests_int4.xml" tests/gpu/test_quant_kernels_gpu.py -k int4
part row_planes 300 python3 benchmarks/int4_row_planes.py --output "$RES/int4_row_planes.json"
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/int4_async.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
