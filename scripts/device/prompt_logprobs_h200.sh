#!/usr/bin/env bash
# prompt_logprobs on one H200: the GPU test against transformers, packed in $OUT/prompt_logprobs.tgz.
#
# From the repository root on the GPU machine:
#   bash scripts/device/prompt_logprobs_h200.sh     # ~1 min
#
# Part gpu_tests: tests/gpu/test_prompt_logprobs_gpu.py, float32 tiny Qwen3, chunked prefill of the
# requests that ask beside CUDA-graph decodes of those that do not, against transformers on CUDA.
# summary.txt has one line per part.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
RES=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RES/gpu.txt" 2>&1 || true
git rev-parse HEAD > "$RES/commit.txt" 2>/dev/null || true

part gpu_tests 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_prompt_logprobs_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/prompt_logprobs.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/prompt_logprobs.tgz"
