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
start_run

part gpu_tests 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_prompt_logprobs_gpu.py
cat "$RES/summary.txt"
tar -czf "$OUT/prompt_logprobs.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/prompt_logprobs.tgz"

