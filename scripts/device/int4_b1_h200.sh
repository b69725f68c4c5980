#!/usr/bin/env bash
# Batch-1 quantized matmuls on one H200 under Nsight Compute, one tarball $OUT/int4_b1.tgz.
#   bash scripts/device/int4_b1_h200.sh
# Parts:
#   1. time   each probe case of scripts/device/int4_b1_probe.py from graph replays (us, TB/s)
#   2. ncu    the same launches under ncu (speed of light, occupancy, warp stalls, memory), clocks untouched
#   3. tests  tests/gpu/test_quant_kernels_gpu.py (every kind's kernels against the references, graphs)
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1 TRITON_CACHE_DIR="$RES/triton_cache"
CASES=${CASES:-"int4_gate_up_mma int4_gate_up_gemv int4_down_mma int4_qkv_gemv int8_gate_up_gemv"}
for c in $CASES; do
  part "time_$c" 120 python3 scripts/device/int4_b1_probe.py "$c" --time
done
if [ -z "${NO_NCU:-}" ]; then
  for c in $CASES; do
    part "ncu_$c" 150 ncu --clock-control none -k regex:_quant_matmul_kernel --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis python3 scripts/device/int4_b1_probe.py "$c"
  done
fi
if [ -z "${NO_TESTS:-}" ]; then
  part tests 300 python3 -m pytest -q -p no:cacheprovider -x --junitxml="$RES/gpu_tests.xml" tests/gpu/test_quant_kernels_gpu.py
fi
rm -rf "$RES/triton_cache"
tar -czf "$OUT/int4_b1.tgz" -C "$RES" .
cat "$RES/summary.txt"
