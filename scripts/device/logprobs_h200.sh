#!/usr/bin/env bash
# [engine-core] logprobs: 5 on one H200, served throughput with and without, packed in $OUT/logprobs.tgz.
#
# From the repository root on the GPU machine:
#   bash scripts/device/logprobs_h200.sh     # ~7 min
#
# Part gpu_tests: the engine's GPU tests that read logprobs (tests/gpu/test_engine_gpu.py).
# Part serving: Qwen3-0.6B dummy bf16 with the word tokenizer (benchmarks/word_tokenizer_model.py), one
# frontend, `mopt serve` at rate inf on 1000 x 512/128, without and with logprobs=5
# (benchmarks/serving.py --with-and-without-logprobs: the ratio the issue asks >= 0.9).
# Part serving_2fe: the same with --api-server-count 2 and `mopt bench --num-workers 4`.
# Part cpu_cost: benchmarks/logprobs_overhead.py on this host's CPU (per-token host cost, with and without).
# summary.txt has one line per part; the JSON files sit beside it.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b "$RES/qwen3-0.6b" > /dev/null 2>&1
QWEN=(--model "$RES/qwen3-0.6b" --load-format dummy --dtype bfloat16)

part gpu_tests 150 python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_engine_gpu.py
part serving 200 python3 benchmarks/serving.py --num-requests 1000 --prompt-len 512 --output-len 128 \
  --loads inf --with-and-without-logprobs --logprobs 5 --output "$RES/serving_logprobs_h200.json" -- "${QWEN[@]}"
part serving_2fe 200 python3 benchmarks/serving.py --num-requests 1000 --prompt-len 512 --output-len 128 \
  --loads inf --with-and-without-logprobs --logprobs 5 --bench-flags "--num-workers 4" \
  --output "$RES/serving_logprobs_2fe_h200.json" -- "${QWEN[@]}" --api-server-count 2
part cpu_cost 120 python3 benchmarks/logprobs_overhead.py --tokenizer-dir "$RES/qwen3-0.6b" --rounds 3 \
  --output "$RES/logprobs_overhead_h200host.json"
cat "$RES/summary.txt"
tar -czf "$OUT/logprobs.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/logprobs.tgz"
