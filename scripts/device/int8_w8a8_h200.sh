#!/usr/bin/env bash
# int8 W8A8 (int8 x int8 tensor cores, activations quantized per token) on one H200, one tarball
# $OUT/int8_w8a8.tgz. From the repository root on the GPU machine:
#   bash scripts/device/int8_w8a8_h200.sh
# Parts:
#   1. sweep   benchmarks/quant_kernels.py --sweep --kinds int8: weight-only and W8A8 candidates per shape and
#              row bucket; the table merged over a copy of the packaged one (quant_tiles.json: commit it)
#   2. tests   tests/gpu/test_quant_kernels_gpu.py (the int8 row quantizer bit-exact, every int8 W8A8
#              candidate and torch._int_mm at the real shapes against int8_w8a8_linear_ref, CUDA graphs)
#              and test_quant_engine_gpu.py, with the merged table
#   3. decode  benchmarks/decode_latency.py, Llama-3.1-8B: bf16, int8, int8-w8a8, fp8 at batch 1 / 8 / 64 / 256,
#              with the merged table
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1 TRITON_CACHE_DIR="$RES/triton_cache"
cp model_optimizer/runtime/kernels/quant_tiles.json "$RES/quant_tiles.json"
part sweep 240 python3 benchmarks/quant_kernels.py --sweep --kinds int8 --m 1 2 4 8 16 32 64 128 256 \
  --methods bf16 int8 int8_w8a8 --tiles-output "$RES/int8_tiles.json" --merge-into "$RES/quant_tiles.json" \
  --output "$RES/quant_kernels_int8.json"
export MOPT_QUANT_TILES="$RES/quant_tiles.json"
part tests 200 python3 -m pytest -q -p no:cacheprovider --junitxml="$RES/gpu_tests.xml" tests/gpu/test_quant_kernels_gpu.py \
  tests/gpu/test_quant_engine_gpu.py
part decode 200 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization none int8 int8-w8a8 fp8 \
  --batch-sizes 1 8 64 256 --output "$RES/decode_int8_w8a8.json"
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
rm -rf "$RES/triton_cache"
tar -czf "$OUT/int8_w8a8.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
