#!/usr/bin/env bash
# Two back-to-back H200 calls after the session's merges (spec in-flight verify, structured lanes,
# columnar logprobs, fused MoE routing, host-tier batching and swap), each <= ~420 s:
#   bash scripts/device/session_c_h200.sh tests   # GPU tests in two lanes, host-tier TTFT, MoE decode profile
#   bash scripts/device/session_c_h200.sh bench   # spec 1/64 clients, structured 1/64, served logprobs (2 frontends)
#   bash scripts/device/session_c_h200.sh tier    # host-tier TTFT after direct copies, offload GPU tests,
#                                                 # offline throughput of Qwen3-30B-A3B beside Qwen3-8B
# Results: ONE tarball, $OUT/session_c_<mode>.tgz.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
MODE=${1:-tests}
source "$(dirname "$0")/common.sh"
start_run
DEADLINE=${DEADLINE:-420}
left() { local l=$((DEADLINE - SECONDS)); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
PYTEST=(python3 -m pytest -q -p no:cacheprovider --durations=5)

if [ "$MODE" = tests ]; then
  part lane_a 180 "${PYTEST[@]}" tests/gpu/test_offload_gpu.py tests/gpu/test_structured_gpu.py tests/gpu/test_spec_gpu.py &
  part lane_b 180 "${PYTEST[@]}" tests/gpu/test_families_gpu.py -k "moe or mixtral or fused" \
    tests/gpu/test_engine_gpu.py tests/gpu/test_prompt_logprobs_gpu.py &
  wait
  cd benchmarks || exit 2
  part host_kv_tier "$(left 100)" python3 host_kv_tier.py --output "$RES/host_kv_tier_h200.json"
  part decode_moe "$(left 85)" python3 decode_latency.py --models qwen3-30b-a3b --batch-sizes 1 64 --profile \
    --output "$RES/decode_qwen3_30b_a3b_routing_h200.json"
  cd ..
elif [ "$MODE" = tier ]; then
  cd benchmarks || exit 2
  part host_kv_tier "$(left 80)" python3 host_kv_tier.py --output "$RES/host_kv_tier_h200.json"
  cd ..
  [ "${SKIP_TESTS:-0}" = 1 ] || part gpu_offload "$(left 70)" "${PYTEST[@]}" tests/gpu/test_offload_gpu.py
  for model in qwen3-30b-a3b qwen3-8b; do
    part "throughput_$model" "$(left 90)" python3 benchmarks/throughput.py --model "$model" --hf-requests 0 \
      --output "$RES/throughput_${model}_h200.json"
  done
else
  python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b "$RES/qwen3-0.6b" > /dev/null 2>&1
  cd benchmarks || exit 2
  part spec "$(left 140)" python3 spec_decode.py --quick --output "$RES/spec_decode_h200.json"
  part structured "$(left 110)" python3 structured.py --bpe-from configs/qwen3-0.6b --concurrency 1 64 \
    --output-len 128 --output "$RES/structured_h200.json" -- --load-format dummy --dtype bfloat16
  part serving_2fe "$(left 170)" python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 \
    --offline --loads inf --with-and-without-logprobs --logprobs 5 --bench-flags "--num-workers 4" \
    --output "$RES/serving_logprobs_2fe_h200.json" -- --model "$RES/qwen3-0.6b" --load-format dummy \
    --dtype bfloat16 --api-server-count 2
  cd ..
fi
cat "$RES/summary.txt"
tar -czf "$OUT/session_c_$MODE.tgz" -C "$RES" .
echo "packed $OUT/session_c_$MODE.tgz"
