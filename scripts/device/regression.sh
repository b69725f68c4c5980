#!/usr/bin/env bash
# Engine speed of this tree against an earlier commit, side by side on one GPU in one run, so that a
# change is judged by a ratio measured on the same machine and not against figures from another day.
#
# Here, once, put the earlier tree beside this one (the model assets are not needed):
#   mkdir -p .base && git archive <commit> model_optimizer benchmarks \
#       | tar -x -C .base --exclude=model_optimizer/assets/pydoc-qwen3
# Then on the GPU machine, from the repository root, with .base/ copied along (and, when the machine
# lacks them, wheels of fastapi/uvicorn/pydantic in .whl/):
#   bash scripts/device/regression.sh speed     offline throughput and decode latency, both trees (~7 min)
#   bash scripts/device/regression.sh tests     tests/gpu on this tree (~3 min)
# Results land in $OUT: speed_base.json / speed_new.json files per benchmark, logs, and a summary table.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200
SITE=${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true

speed() {  # speed TREE NAME: throughput and decode latency of the tree at TREE, results tagged NAME
  local tree=$1 name=$2
  (cd "$tree" && PYTHONPATH=".:$SITE" timeout 150 python3 benchmarks/throughput.py --hf-requests 0 \
      --output "$OUT/throughput_$name.json") > "$OUT/throughput_$name.log" 2>&1
  echo "[$SECONDS s] throughput $name: $(grep -E '^ours' "$OUT/throughput_$name.log")"
  (cd "$tree" && PYTHONPATH=".:$SITE" timeout 120 python3 benchmarks/decode_latency.py \
      --output "$OUT/decode_$name.json") > "$OUT/decode_$name.log" 2>&1
  echo "[$SECONDS s] decode $name: $(grep -c ms/step "$OUT/decode_$name.log") rows"
}

case "${1:-speed}" in
  speed)
    [ -d .base/model_optimizer ] || { echo "missing .base/: see the header of this script" >&2; exit 2; }
    speed . new
    speed .base base
    for name in base new; do echo "== $name"; grep ms/step "$OUT/decode_$name.log"; done
    ;;
  tests)
    PYTHONPATH=".:$SITE" timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$OUT/gpu_tests.txt" 2>&1
    tail -15 "$OUT/gpu_tests.txt"
    ;;
  *) echo "usage: $0 speed|tests" >&2; exit 2 ;;
esac
