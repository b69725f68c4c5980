#!/usr/bin/env bash
# The last full device run of a session, most important first, each part under its own time limit
# so one slow part cannot starve the others: engine throughput (with transformers' baseline), decode
# latency; embeddings; prefix caching (the GPU tests take three calls of their own: scripts/device/gpu_tests_h200.sh). Everything lands in $OUT/results.tgz, re-packed
# after every part, so a run cut short still returns what it measured. One device command may run
# 10 minutes, so the work comes in parts: `engine` (about 6 minutes), `embed` (about 9: scripts/device/embed_gpu.sh)
# and `prefix` (about 1).
# Usage, from the repository root on the GPU machine: bash scripts/device_final.sh engine|embed|prefix
# Needs there: wheels of fastapi/uvicorn/pydantic/optuna in .whl/ when the machine lacks them (they are
# installed into /tmp/site), and for `embed` MiniLM's config files in build/minilm-files (see embed_gpu.sh).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
RESULTS=$(mktemp -d)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/results.tgz" -C "$RESULTS" . ; echo "[$SECONDS s] $1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RESULTS/gpu.txt"
if [ "${1:-engine}" = engine ]; then
timeout 230 python3 benchmarks/throughput.py --hf-requests 8 --hf-timeout 110 \
    --output "$RESULTS/throughput_h200.json" > "$RESULTS/throughput.log" 2>&1
pack "throughput: $(grep -E '^(ours|transformers)' "$RESULTS/throughput.log" | tr '\n' ' ')"
timeout 150 python3 benchmarks/decode_latency.py --profile --output "$RESULTS/decode_latency_h200.json" \
    > "$RESULTS/decode_latency.log" 2>&1
pack "decode: $(grep -c ms/step "$RESULTS/decode_latency.log") rows"
elif [ "$1" = prefix ]; then
timeout 70 python3 benchmarks/prefix_caching.py --output "$RESULTS/prefix_caching_h200.json" > "$RESULTS/prefix.log" 2>&1
pack "prefix caching done"
elif [ "$1" = embed ]; then
exec bash scripts/device/embed_gpu.sh  # packs its own $OUT/results.tgz
else
echo "usage: $0 engine|embed|prefix" >&2; exit 2
fi
