#!/usr/bin/env bash
# The whole tests/gpu suite on one H200, in two halves that each fit one device call (10 minutes): the
# suite takes ~13 minutes (the first half ~6, the second ~7.5 in the last run), so no single call holds it.
#   bash scripts/device/gpu_tests_h200.sh 1     test files up to test_kernels_gpu.py (alphabetical)
#   bash scripts/device/gpu_tests_h200.sh 2     the files after it
# Each half writes $OUT/gpu_tests_HALF.log (one line per test, the slowest 15, the failures) under a
# 560 s limit; wheels the machine lacks come from .whl/ as for the other scripts.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
HALF=${1:?usage: $0 1|2}
source "$(dirname "$0")/common.sh"
start_run
SPLIT=test_kernels_gpu.py
case "$HALF" in
  1) FILES=$(ls tests/gpu/test_*.py | awk -F/ -v s="$SPLIT" '$3 <= s') ;;
  2) FILES=$(ls tests/gpu/test_*.py | awk -F/ -v s="$SPLIT" '$3 > s') ;;
  *) echo "usage: $0 1|2" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086  # one argument per file
timeout 560 python3 -m pytest -v -p no:cacheprovider --timeout 200 --durations=15 $FILES > "$OUT/gpu_tests_$HALF.log" 2>&1
echo "exit $?: $(tail -1 "$OUT/gpu_tests_$HALF.log")"
