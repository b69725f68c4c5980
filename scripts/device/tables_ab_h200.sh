#!/usr/bin/env bash
# Decode steps with several tile tables, alternated in one call on one H200; one tarball $OUT/tables_ab.tgz.
# From the repository root on the GPU machine, with the tables in out/ab/NAME.json (carry "out"):
#   TABLES="pkg new" ROUNDS=2 bash scripts/device/tables_ab_h200.sh
# Each round runs benchmarks/decode_latency.py once per table (MOPT_QUANT_TILES=out/ab/NAME.json), in
# the order given: MODELS (default llama-3.1-8b), QUANT (default rtn-int4), BATCHES (default 1 2 4 8 16 32).
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
host_info
for round in $(seq "${ROUNDS:-2}"); do
  for name in ${TABLES:?name the tables in out/ab}; do
    part "decode_${name}_${round}" 200 env MOPT_QUANT_TILES="out/ab/$name.json" python3 benchmarks/decode_latency.py \
      --models ${MODELS:-llama-3.1-8b} --quantization ${QUANT:-rtn-int4} --batch-sizes ${BATCHES:-1 2 4 8 16 32} \
      --output "$RES/decode_${name}_${round}.json"
  done
done
if [ -n "${TESTS_TABLE:-}" ]; then  # GPU tests of the quantized kernels with one of the tables
  part tests 240 env MOPT_QUANT_TILES="out/ab/$TESTS_TABLE.json" python3 -m pytest -q -p no:cacheprovider \
    --junitxml="$RES/gpu_tests_quant.xml" tests/gpu/test_quant_kernels_gpu.py tests/gpu/test_quant_engine_gpu.py
fi
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/tables_ab.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
