#!/usr/bin/env bash
# The default rule's W8A8 through cuBLAS from the 128-row bucket (quant_tiles.W8A8_MIN_BUCKET) on any sm_90
# GPU: the quantized kernels' and engine's GPU tests with the packaged table, the same kernels' shape and
# graph tests and the engine's with an empty table (every shape on the default rule), then Llama-3.1-8B
# decode steps with the empty table, fp8 and int8-w8a8, the rule before (W8A8_MIN_BUCKET 512: cuBLAS only
# above 256 rows) against the rule now, bf16 beside them. Carry ".whl". BATCHES (default 128 256);
# SKIP_PARTS (common.sh) leaves parts out. Results in $OUT/w8a8_default.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
empty_table
KERNELS=tests/gpu/test_quant_kernels_gpu.py
ENGINE=tests/gpu/test_quant_engine_gpu.py
part tests_table 300 python3 -m pytest -q -p no:cacheprovider "$KERNELS" "$ENGINE"
part tests_rule 200 env MOPT_QUANT_TILES=out/ab/none.json python3 -m pytest -q -p no:cacheprovider "$KERNELS" \
  "$ENGINE" -k "real_shapes or graph_replays or w8a8 or same_with_and_without"
decode() {  # decode NAME MIN_BUCKET QUANT
  part "decode_$1" 120 env MOPT_QUANT_TILES=out/ab/none.json python3 - "$2" --models llama-3.1-8b \
    --quantization "$3" --batch-sizes ${BATCHES:-128 256} --output "$RES/decode_$1.json" <<'PY'
import runpy, sys
import model_optimizer.runtime.kernels.quant_tiles as tiles
tiles.W8A8_MIN_BUCKET = int(sys.argv.pop(1))
sys.argv[0] = "benchmarks/decode_latency.py"
sys.path.insert(0, "benchmarks")
runpy.run_path("benchmarks/decode_latency.py", run_name="__main__")
PY
}
for quant in fp8 int8-w8a8; do
  decode "${quant}_before" 512 "$quant"
  decode "${quant}_now" 128 "$quant"
done
part decode_bf16 90 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization none \
  --batch-sizes ${BATCHES:-128 256} --output "$RES/decode_bf16.json"
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/w8a8_default.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
