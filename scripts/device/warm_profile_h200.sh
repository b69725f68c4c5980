#!/usr/bin/env bash
# Where a warm `mopt serve` start of Qwen3-0.6B (dummy weights) spends its time on one H200: one cold start
# fills the compile cache, then three warm starts, the last under py-spy (both processes, --subprocesses),
# each to /ready; one tarball $OUT/warm_profile.tgz (start-up logs, the py-spy raw stacks, /ready times).
#   bash scripts/device/warm_profile_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
export MOPT_COMPILE_CACHE_DIR=/tmp/mopt-cc
SERVE=(python3 -m model_optimizer.cli.main serve --model benchmarks/configs/qwen3-0.6b --load-format dummy
       --dtype bfloat16 --port 8123)
ready() {  # seconds until /ready answers 200 (at most 120)
  python3 - "$1" <<'PY'
import sys, time, urllib.request
t0 = float(sys.argv[1])
while time.time() - t0 < 120:
    try:
        if urllib.request.urlopen("http://127.0.0.1:8123/ready", timeout=1).status == 200:
            print(f"{time.time() - t0:.2f}"); break
    except Exception:
        time.sleep(0.05)
PY
}
stop() {  # SIGINT to the server, then wait until its port is free
  pkill -INT -f "model_optimizer.cli.main serve" ; sleep 3; pkill -9 -f "model_optimizer.cli.main serve"; sleep 1
}
for run in ${RUNS:-cold warm1 warm2}; do
  t0=$(date +%s.%N); "${SERVE[@]}" > "$RES/$run.log" 2>&1 &
  echo "$run ready_s $(ready "$t0")" | tee -a "$RES/summary.txt"; stop
done
export PATH="/tmp/site/bin:$PATH"  # py-spy from a wheel in .whl/ (common.sh installs them there)
if ! command -v py-spy > /dev/null; then
  echo "no py-spy on this machine: put its wheel in .whl/" | tee -a "$RES/summary.txt"
  tar -czf "$OUT/warm_profile.tgz" -C "$RES" .; exit 0
fi
t0=$(date +%s.%N)
py-spy record --subprocesses -r 250 -f raw -o "$RES/warm_pyspy.txt" -- "${SERVE[@]}" > "$RES/warm3.log" 2>&1 &
echo "warm3 (py-spy) ready_s $(ready "$t0")" | tee -a "$RES/summary.txt"; stop; sleep 2
tar -czf "$OUT/warm_profile.tgz" -C "$RES" .
cat "$RES/summary.txt"; grep -h -i "phase\|start-up\|ready\|took" "$RES/warm2.log" | head -30
