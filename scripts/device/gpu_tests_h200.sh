#!/usr/bin/env bash
# The whole tests/gpu suite on one H200, in three parts that each fit one device call (10 minutes): the
# suite takes ~13 minutes on a warm machine (first part ~6), more on a fresh one (the old second half,
# files 10-28, ran past 560 s there), so no single call holds it.
#   bash scripts/device/gpu_tests_h200.sh 1     test files up to test_kernels_gpu.py (alphabetical)
#   bash scripts/device/gpu_tests_h200.sh 2     the files after it up to test_perf_gpu.py
#   bash scripts/device/gpu_tests_h200.sh 3     the files after that
# Each part writes $OUT/gpu_tests_PART.log (one line per test, the slowest 15, the failures) under a
# 560 s limit; wheels the machine lacks come from .whl/ as for the other scripts.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
PART=${1:?usage: $0 1|2|3}
source "$(dirname "$0")/common.sh"
start_run
FIRST=test_kernels_gpu.py SECOND=test_perf_gpu.py
case "$PART" in
  1) FILES=$(ls tests/gpu/test_*.py | awk -F/ -v a="$FIRST" '$3 <= a') ;;
  2) FILES=$(ls tests/gpu/test_*.py | awk -F/ -v a="$FIRST" -v b="$SECOND" '$3 > a && $3 <= b') ;;
  3) FILES=$(ls tests/gpu/test_*.py | awk -F/ -v b="$SECOND" '$3 > b') ;;
  *) echo "usage: $0 1|2|3" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086  # one argument per file
timeout 560 python3 -m pytest -v -p no:cacheprovider --timeout 200 --durations=15 $FILES > "$OUT/gpu_tests_$PART.log" 2>&1
echo "exit $?: $(tail -1 "$OUT/gpu_tests_$PART.log")"
