#!/usr/bin/env bash
# The H100 SXM with the H200's tile table (its "also"): the quantized kernels' and engine's GPU tests and
# the structured GPU tests under it, then the int4 decode step with the table before its Gluon entries
# (out/ab/pkg.json) against the packaged one (out/ab/new.json), both with "also" naming the H100. Carry
# "out" and ".whl". BATCHES (default 64 256). Results in $OUT/h100_table.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
part quant_tests 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
  tests/gpu/test_quant_engine_gpu.py
part structured_tests 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_structured_gpu.py
for table in pkg new; do
  part "decode_$table" 90 env MOPT_QUANT_TILES="out/ab/$table.json" python3 benchmarks/decode_latency.py \
    --models llama-3.1-8b --quantization rtn-int4 --batch-sizes ${BATCHES:-64 256} --output "$RES/decode_$table.json"
done
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/h100_table.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
