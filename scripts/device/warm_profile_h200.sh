#!/usr/bin/env bash
# Where a warm `mopt serve` start of Qwen3-0.6B (dummy weights) spends its time on one H200: one cold start
# fills the compile cache, then three warm starts, the last under py-spy (both processes, --subprocesses),
# each to /ready; one tarball $OUT/warm_profile.tgz (start-up logs, the py-spy raw stacks, /ready times).
# PYC=1 keeps Python's bytecode between starts (PYTHONPYCACHEPREFIX=/tmp/pyc, bytecode writing on), as an
# installed package has it: this machine's image ships torch without .pyc files and writes none.
#   [PYC=1] bash scripts/device/warm_profile_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
export MOPT_COMPILE_CACHE_DIR=/tmp/mopt-cc
[ "${PYC:-0}" = 1 ] && keep_bytecode
env | grep '^PYTHON' > "$RES/python_env.txt"
for i in 1 2; do  # a fresh interpreter's torch import, twice (the second finds the first's bytecode if PYC=1)
  python3 -c "import time; t = time.perf_counter(); import torch; print(f'import torch {time.perf_counter() - t:.2f} s')" \
    | tee -a "$RES/summary.txt"
done
SERVE=("${SERVE_QWEN3[@]}")
for run in ${RUNS:-cold warm1 warm2}; do
  t0=$(date +%s.%N); "${SERVE[@]}" > "$RES/$run.log" 2>&1 &
  echo "$run ready_s $(serve_ready_s "$t0")" | tee -a "$RES/summary.txt"; stop_serve
done
export PATH="/tmp/site/bin:$PATH"  # py-spy from a wheel in .whl/ (common.sh installs them there)
if ! command -v py-spy > /dev/null; then
  echo "no py-spy on this machine: put its wheel in .whl/" | tee -a "$RES/summary.txt"
  tar -czf "$OUT/warm_profile.tgz" -C "$RES" .; exit 0
fi
t0=$(date +%s.%N)
py-spy record --subprocesses -r 250 -f raw -o "$RES/warm_pyspy.txt" -- "${SERVE[@]}" > "$RES/warm3.log" 2>&1 &
echo "warm3 (py-spy) ready_s $(serve_ready_s "$t0")" | tee -a "$RES/summary.txt"; stop_serve; sleep 2
tar -czf "$OUT/warm_profile.tgz" -C "$RES" .
cat "$RES/summary.txt"; grep -h -i "phase\|start-up\|ready\|took" "$RES/warm2.log" | head -30
