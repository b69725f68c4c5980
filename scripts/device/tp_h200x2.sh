#!/usr/bin/env bash
# Tensor parallelism on the 2-GPU H200 machine, in one run of at most ~9 minutes: the GPU tests, the
# NCCL vs symmetric-memory all-reduce micro-benchmark, then decode ms/step (batch 1/8/64) and
# all-reduce time per step for Llama-3.1-8B at TP=1 and TP=2 (with nano-vllm's throughput workload on
# each) and Llama-3.1-70B's config at TP=2, all with dummy bf16 weights (benchmarks/tp.py).
#
# From the repository root on the machine (wheels of fastapi/uvicorn/pydantic in .whl/ when it lacks
# them, as for regression.sh):
#   bash scripts/device/tp_h200x2.sh
# Every part has its own time limit and the script goes on when one fails or times out; each part
# logs to $OUT/<part>.log and writes $OUT/<part>.json, merged at the end into $OUT/tp_h200x2.json,
# with a summary in $OUT/summary.txt.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
install_wheels
export PYTHONUNBUFFERED=1 COLUMNS=200 PYTHONPATH=".:${PYTHONPATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1  # multicast stays off on the lent machines
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1 || true
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true

part() {  # part NAME SECONDS COMMAND...: run with a time limit (SIGTERM, then SIGKILL 15 s later), log, go on
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "[$SECONDS s] $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
  # a part killed by its limit may leave workers behind only for as long as they take to notice
  sleep 2
}

part gpu_tests 140 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_tp_gpu.py tests/gpu/test_sharded_gpu.py
tail -5 "$OUT/gpu_tests.log" >> "$OUT/summary.txt"
part allreduce 50 python3 benchmarks/tp.py allreduce --timeout 30 --output "$OUT/allreduce.json"
part llama8b_tp1 110 python3 benchmarks/tp.py engine --model llama-3.1-8b --tp 1 --throughput --output "$OUT/llama8b_tp1.json"
part llama8b_tp2 120 python3 benchmarks/tp.py engine --model llama-3.1-8b --tp 2 --throughput --output "$OUT/llama8b_tp2.json"
part llama70b_tp2 130 python3 benchmarks/tp.py engine --model llama-3.1-70b --tp 2 --output "$OUT/llama70b_tp2.json"
python3 benchmarks/tp.py merge "$OUT"/allreduce.json "$OUT"/llama8b_tp1.json "$OUT"/llama8b_tp2.json \
  "$OUT"/llama70b_tp2.json --output "$OUT/tp_h200x2.json" > "$OUT/merge.log" 2>&1
grep -hE "ms/step|tok/s|ready in|Error" "$OUT"/llama*.log "$OUT"/allreduce.log >> "$OUT/summary.txt" 2>/dev/null
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$OUT/summary.txt" 2>&1 || true
cat "$OUT/summary.txt"
