#!/usr/bin/env bash
# [engine-core] on one H200: the engine core in its own process, measured and profiled.
#   1. GPU tests of the engine (tests/gpu/test_engine_gpu.py, test_graphs_gpu.py)          <= 150 s
#   2. Qwen3-0.6B dummy bf16 + the word tokenizer (benchmarks/word_tokenizer_model.py): the offline
#      engine on 1000 x 512/128, then `mopt serve` at rate inf, 64 clients and 1 client, without and
#      with logprobs=5 (benchmarks/serving.py)                                              <= 240 s
#   3. py-spy of both processes (frontend, engine core) during a rate-inf run               <= 90 s
#   4. Llama-3.1-8B dummy bf16, same loads, without logprobs, if time is left              <= rest
# Everything lands in $OUT/engine_core.tgz (one file: the device returns few files).
# From the repository root on the GPU machine, with the wheels in .whl/:
#   bash scripts/device/engine_core_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
BUDGET=${BUDGET:-420}
W=/tmp/ec; mkdir -p "$W"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH PYTHONPATH="$PWD:/tmp/site"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$W/gpu.txt" 2>&1 || true
log() { echo "[$SECONDS s] $*" | tee -a "$W/summary.txt"; }
part() {  # part NAME SECONDS COMMAND...: never past the budget, never stops the script
  local name=$1 limit=$2; shift 2
  local room=$(( BUDGET - SECONDS ))
  if [ "$room" -lt 30 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; log "$name exit $? ($limit s allowed)"
  tail -3 "$W/$name.log" >> "$W/summary.txt"
}
pack() { tar czf "$OUT/engine_core.tgz" -C /tmp ec; }
trap pack EXIT

python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b "$W/qwen3-0.6b" > /dev/null 2>&1
python3 benchmarks/word_tokenizer_model.py benchmarks/configs/llama-3.1-8b "$W/llama-3.1-8b" > /dev/null 2>&1
QWEN=(--model "$W/qwen3-0.6b" --load-format dummy --dtype bfloat16)
LLAMA=(--model "$W/llama-3.1-8b" --load-format dummy --dtype bfloat16)

part gpu_tests 150 python3 -m pytest -q -p no:cacheprovider --timeout 120 -x tests/gpu/test_engine_gpu.py tests/gpu/test_graphs_gpu.py
cd benchmarks || exit 2
part serving_qwen 240 python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 --offline \
  --loads inf 64 1 --with-and-without-logprobs --logprobs 5 --output "$W/serving_qwen_h200.json" -- "${QWEN[@]}"
cd .. || exit 2

profile() {  # a rate-inf run with py-spy on the frontend and on the engine core
  local port=8123
  python3 -m model_optimizer.cli.main serve "${QWEN[@]}" --port $port --log-level warning > "$W/profile_server.log" 2>&1 &
  local server=$!
  python3 -c "
import time, urllib.request
for _ in range(600):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/ready', timeout=2); break
    except Exception:
        time.sleep(0.5)"
  local core; core=$(pgrep -P "$server" -f spawn_main | head -1)
  python3 -m model_optimizer.cli.main bench --base-url "http://127.0.0.1:$port" --prompt-len 512 --output-len 128 \
    --num-requests 1000 --request-rate inf --no-progress --output-dir "$W/profile_bench" > "$W/profile_bench.log" 2>&1 &
  local bench=$!
  sleep 3
  py-spy record -p "$server" -d 8 -r 200 -f raw -o "$W/pyspy_frontend.txt" > "$W/pyspy_frontend.log" 2>&1 &
  py-spy record -p "$core" -d 8 -r 200 -f raw -o "$W/pyspy_core.txt" > "$W/pyspy_core.log" 2>&1 &
  top -b -d 2 -n 5 > "$W/top.txt" 2>&1
  wait "$bench"
  kill -TERM "$server"; wait "$server"
}
export -f profile; export W QWEN
part profile 90 bash -c "QWEN=(${QWEN[*]}); profile"

cd benchmarks || exit 2
part serving_llama 240 python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 --offline \
  --loads inf 64 1 --output "$W/serving_llama_h200.json" -- "${LLAMA[@]}"
cd .. || exit 2
cat "$W/summary.txt"
