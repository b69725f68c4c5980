#!/usr/bin/env bash
# Cold `mopt serve` starts of Qwen3-0.6B (dummy weights) to /ready, each from an empty compile cache, with
# and without the compile-ahead workers (MOPT_COMPILE_JOBS), alternated, Python's bytecode kept between
# starts (keep_bytecode in common.sh: the workers are fresh interpreters, which otherwise compile torch's
# bytecode again). One unmeasured start first fills the bytecode. One line per start (/ready seconds and
# the core's phases), then $OUT/compile_jobs.tgz.
#   ROUNDS=2 JOBS="0 8" bash scripts/device/compile_jobs_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
keep_bytecode
host_info
start() {  # start JOBS NAME: one start from an empty compile cache, its log in $RES/NAME.log
  local t0 s; export MOPT_COMPILE_CACHE_DIR; MOPT_COMPILE_CACHE_DIR=$(mktemp -d)
  t0=$(date +%s.%N)
  MOPT_COMPILE_JOBS=$1 "${SERVE_QWEN3[@]}" > "$RES/$2.log" 2>&1 &
  s=$(serve_ready_s "$t0"); stop_serve; rm -rf "$MOPT_COMPILE_CACHE_DIR"
  echo "$2 ready_s $s $(grep -o 'start-up: [a-z -]* [0-9.]* s' "$RES/$2.log" | sed 's/start-up: //' | tr '\n' ',')"
}
{
  start 0 fill_bytecode
  for i in $(seq 1 "${ROUNDS:-2}"); do
    for jobs in ${JOBS:-0 8}; do start "$jobs" "jobs${jobs}_$i"; done
  done
} | tee "$RES/summary.txt"
python3 benchmarks/warm_ab_summary.py "$RES" | tee -a "$RES/summary.txt"  # and $RES/summary.json
tar -czf "$OUT/compile_jobs.tgz" -C "$RES" .
echo "wrote $OUT/compile_jobs.tgz"
