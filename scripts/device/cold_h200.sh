#!/usr/bin/env bash
# Where a `mopt serve` start of Qwen3-0.6B (dummy weights) spends its time on one H200, <= ~330 s,
# ONE tarball $OUT/cold.tgz:
#   1. python -X importtime of the server's and the engine core's imports (top 30 cumulative)     <= 40 s
#   2. cold_start.py --no-llm: cold without the compile-ahead workers (MOPT_COMPILE_JOBS=0, the default),
#      then cold with eight of them (MOPT_COMPILE_JOBS=8), and warm; each start's phase lines and "compiled ahead" line kept in the JSON  <= 200 s
#   3. tests/gpu/test_compile_ahead_gpu.py: workers compile everything, a second start none, a failed
#      start leaves no worker                                                                     <= 120 s
#   bash scripts/device/cold_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
for what in "model_optimizer.cli.main" "model_optimizer.runtime.core_process"; do
  name=importtime_${what##*.}
  python3 -X importtime -c "import $what" 2> "$RES/$name.raw" || true
  sort -t'|' -k2 -n -r "$RES/$name.raw" | head -30 > "$RES/$name.txt"
  echo "$what: $(head -1 "$RES/$name.txt")" >> "$RES/summary.txt"
done
QWEN_SERVE=(-- --model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16)
cd benchmarks || exit 2
part cold_serial 100 env MOPT_COMPILE_JOBS=0 python3 cold_start.py --no-llm --no-tokenizer --runs 1 \
  --output "$RES/cold_start_serial_compile_h200.json" "${QWEN_SERVE[@]}"
part cold_ahead 100 env MOPT_COMPILE_JOBS=8 python3 cold_start.py --no-llm --no-tokenizer --runs 1 --output "$RES/cold_start_h200.json" \
  "${QWEN_SERVE[@]}"
cd .. || exit 2
part compile_ahead_gpu 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_compile_ahead_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/cold.tgz" -C "$RES" .
echo "packed $OUT/cold.tgz"
