#!/usr/bin/env bash
# Programmatic dependent launch (kernels/pdl.py) on one H200: decode with MOPT_PDL=1 against MOPT_PDL=0,
# alternated in one call (PDL_ROUNDS rounds, default 2), for DECODE_MODELS (default Qwen3-0.6B and
# Llama-3.1-8B) at BATCHES (default 1), with each decode graph's kernels; then the GPU tests named in
# PDL_TESTS (default: kernels and graphs) with PDL on. Results: ONE tarball, $OUT/pdl.tgz.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
python3 -c "import triton; from triton.language.extra.cuda import gdc_wait; print('triton', triton.__version__, 'has gdc')" \
  >> "$RES/summary.txt" 2>&1
for round in $(seq "${PDL_ROUNDS:-2}"); do
  for pdl in 1 0; do
    for model in ${DECODE_MODELS:-qwen3-0.6b llama-3.1-8b}; do
      part "decode_pdl${pdl}_r${round}_$model" 120 env MOPT_PDL=$pdl python3 benchmarks/decode_latency.py \
        --models "$model" --batch-sizes ${BATCHES:-1} --profile --output "$RES/decode_pdl${pdl}_r${round}_$model.json"
      grep -E "ms/step" "$RES/decode_pdl${pdl}_r${round}_$model.log" | sed "s/^/pdl=$pdl r$round /" >> "$RES/summary.txt"
    done
  done
done
decode_table "$RES" > "$RES/ab.txt" 2>&1
cat "$RES/ab.txt" >> "$RES/summary.txt"
if [ -n "${PDL_TESTS-tests/gpu/test_kernels_gpu.py tests/gpu/test_graphs_gpu.py}" ]; then
  part gpu_tests "${TESTS_LIMIT:-200}" python3 -m pytest -q -p no:cacheprovider --timeout 120 --durations=8 \
    ${PDL_TESTS-tests/gpu/test_kernels_gpu.py tests/gpu/test_graphs_gpu.py}
fi
cat "$RES/summary.txt"
tar -czf "$OUT/pdl.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/pdl.tgz"
