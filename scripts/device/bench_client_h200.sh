#!/usr/bin/env bash
# The `mopt bench` client's headroom on the H200 host's CPUs (issue 26, item 4); no GPU is used (~2 min):
#   1. benchmarks/bench_client_workers.py: a fake streaming server (no engine) in 6 processes on one
#      port, pinned to the last 6 CPUs; the client with 1, 2, 4 and 8 worker processes on the other
#      CPUs, closed loop at 256 streams of 128 one-token chunks, 10 s each: chunks/s and tokens/s the
#      client sustains, its CPU per worker and loop lag, and the server's CPU          <= 150 s
#   2. benchmarks/bench_client_overhead.py: one client core against a one-core server (the single-core
#      ceiling the `--num-workers auto` rule is sized from), 3 s per load              <=  90 s
# Every JSON, log and summary.txt goes into ONE tarball, $OUT/bench_client.tgz. From the repository
# root on the machine, with wheels of httpx/pydantic-core/rich in .whl/ when it lacks them (see
# scripts/device/regression.sh):
#   bash scripts/device/bench_client_h200.sh          (PYTHON=... to use another interpreter than python3)
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
{ nproc; lscpu 2>/dev/null | head -20; uptime; } > "$WORK/machine.txt" 2>&1

part() {  # part NAME SECONDS COMMAND...: run with a limit, log to NAME.log, never stop the script
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  echo "[$SECONDS s] $name: exit $rc" | tee -a "$WORK/summary.txt"
  tail -6 "$WORK/$name.log" >> "$WORK/summary.txt"
}

part bench_client_workers 150 "$PY" benchmarks/bench_client_workers.py --workers 1,2,4,8 \
  --server-procs 6 --seconds 10 --out "$WORK/bench_client_workers_h200.json"
part bench_client_overhead 90 "$PY" benchmarks/bench_client_overhead.py --seconds 3 \
  --out "$WORK/bench_client_overhead_h200.json"
tar -czf "$OUT/bench_client.tgz" -C "$WORK" .
cat "$WORK/summary.txt"
ls -l "$OUT/bench_client.tgz"
rm -rf "$WORK"
