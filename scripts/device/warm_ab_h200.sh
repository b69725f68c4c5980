#!/usr/bin/env bash
# Warm `mopt serve` starts of Qwen3-0.6B (dummy weights) to /ready, two trees alternated in one device call,
# with Python's bytecode kept between starts (keep_bytecode in common.sh, as an installed package has it):
# "new" is this checkout, "old" is it with the files of an overlay folder copied over it (default out/ab,
# ignored by git: `git show REV:path > out/ab/path` for each changed file; name `out` in the call's carry).
# One cold start fills the compile cache, one unmeasured start of each tree its bytecode; then ROUNDS
# rounds of ORDER. One line per start (/ready seconds and the core's phases), each tree's medians
# (benchmarks/warm_ab_summary.py, also as summary.json), then $OUT/warm_ab.tgz.
#   ROUNDS=4 ORDER="old new" bash scripts/device/warm_ab_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
keep_bytecode
export MOPT_COMPILE_CACHE_DIR=/tmp/mopt-cc
overlay_tree
start() {  # start TREE NAME: one start of TREE's server to /ready, its log in $RES/NAME.log
  local dir; dir=$(tree_dir "$1")
  local t0; t0=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH="/tmp/site:$dir" exec "${SERVE_QWEN3[@]}") > "$RES/$2.log" 2>&1 &
  local s; s=$(serve_ready_s "$t0"); stop_serve
  echo "$2 ready_s $s $(grep -o 'start-up: [a-z -]* [0-9.]* s' "$RES/$2.log" | sed 's/start-up: //' | tr '\n' ',')"
}
{
  start new cold; start old fill_old; start new fill_new
  for i in $(seq 1 "${ROUNDS:-3}"); do
    for tree in ${ORDER:-old new}; do start "$tree" "${tree}_$i"; done
  done
} | tee "$RES/summary.txt"
python3 benchmarks/warm_ab_summary.py "$RES" | tee -a "$RES/summary.txt"  # and $RES/summary.json
rm -rf "$OLD"
tar -czf "$OUT/warm_ab.tgz" -C "$RES" .
echo "wrote $OUT/warm_ab.tgz"
