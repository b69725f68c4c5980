#!/usr/bin/env bash
# This wave's GPU checks in one H200 call (~9 minutes), for a session with little device time left.
# The GPU tests of every issue run first in two lanes side by side (correctness only: each engine takes
# at most ~0.3 of the GPU's memory, so two lanes fit), then the benchmarks one after another, alone on
# the GPU, each trimmed to its headline figure:
#   tests    lane A: speculative decoding, structured outputs, prompt logprobs, offload, the engine, graphs
#            lane B: DeepSeek (MLA), the MoE/GLM/Gemma families, the quantized kernels and engine  <= 230 s
#   spec     benchmarks/spec_decode.py --quick: Llama-3.1-8B dummy, 1B-shaped draft, n-gram, itself
#            as draft; 1 and 64 requests against none                                            <= 170 s
#   struct   benchmarks/structured.py: TPOT with a JSON schema at 1 and 64 requests, Qwen3-0.6B    <= 90 s
#   serve    benchmarks/serving.py: Qwen3-0.6B + word tokenizer, offline, then mopt serve at rate
#            inf with --api-server-count 2 and `mopt bench --num-workers 4`, with and without logprobs <= 140 s
#   linears  benchmarks/quant_kernels.py: Qwen3-0.6B per-step linears per format at M 64-256, graphed <= 35 s
#   decode   benchmarks/decode_latency.py: Llama-3.1-8B rtn-int4 / bf16 / fp8 / int8, batch 1, 64, 256 <= rest
# Everything lands in ONE tarball, $OUT/wave.tgz. From the repository root, wheels in .whl/ (with
# jsonschema and its needs: tests/gpu/test_structured_gpu.py imports it):
#   bash scripts/device/wave_h200.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that receives wave.tgz}"
BUDGET=${BUDGET:-560}
W=/tmp/wave; rm -rf "$W"; mkdir -p "$W"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH PYTHONPATH="$PWD:/tmp/site"
export TRITON_CACHE_DIR="$W/triton_cache"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$W/gpu.txt" 2>&1 || true
git log --oneline -1 > "$W/commit.txt" 2>&1 || true
log() { echo "[$SECONDS s] $*" | tee -a "$W/summary.txt"; }
part() {  # part NAME SECONDS COMMAND...: never past the budget, never stops the script
  local name=$1 limit=$2; shift 2
  local room=$(( BUDGET - SECONDS ))
  if [ "$room" -lt 20 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout -k 10 "$limit" "$@" > "$W/$name.log" 2>&1; log "$name exit $? ($limit s allowed)"
  tail -3 "$W/$name.log" >> "$W/summary.txt"
}
pack() { rm -rf "$W/triton_cache"; tar czf "$OUT/wave.tgz" -C /tmp wave; }
trap pack EXIT

PYTEST=(python3 -m pytest -q -p no:cacheprovider -rfE)
lane_a() {
  "${PYTEST[@]}" --junitxml="$W/lane_a.xml" tests/gpu/test_spec_gpu.py tests/gpu/test_structured_gpu.py \
    tests/gpu/test_prompt_logprobs_gpu.py tests/gpu/test_offload_gpu.py tests/gpu/test_engine_gpu.py \
    tests/gpu/test_graphs_gpu.py
}
lane_b() {
  "${PYTEST[@]}" --junitxml="$W/lane_b.xml" tests/gpu/test_mla_gpu.py tests/gpu/test_families_gpu.py \
    tests/gpu/test_quant_kernels_gpu.py tests/gpu/test_quant_engine_gpu.py tests/gpu/test_fused_ops_gpu.py
}
export -f lane_a lane_b; export W
(timeout -k 10 230 bash -c "PYTEST=(${PYTEST[*]}); lane_a" > "$W/tests_a.log" 2>&1; log "tests lane A exit $?") &
(timeout -k 10 230 bash -c "PYTEST=(${PYTEST[*]}); lane_b" > "$W/tests_b.log" 2>&1; log "tests lane B exit $?") &
python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b "$W/qwen3-0.6b" > /dev/null 2>&1
wait

cd benchmarks || exit 2
part spec 170 python3 spec_decode.py --quick --output "$W/spec_decode_h200.json"
part struct 90 python3 structured.py --bpe-from configs/qwen3-0.6b --concurrency 1 64 --output-len 128 \
  --output "$W/structured_h200.json" -- --load-format dummy --dtype bfloat16
part serve 140 python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 --offline --loads inf \
  --with-and-without-logprobs --logprobs 5 --bench-flags "--num-workers 4" --output "$W/serving_api2_h200.json" -- \
  --model "$W/qwen3-0.6b" --load-format dummy --dtype bfloat16 --api-server-count 2
part linears 35 python3 quant_kernels.py --models qwen3-0.6b --methods bf16 fp8 int8 int4 \
  --m 64 128 256 --output "$W/quant_kernels.json"
part decode 120 python3 decode_latency.py --models llama-3.1-8b --quantization rtn-int4 none fp8 int8 \
  --batch-sizes 1 64 256 --output "$W/decode_llama.json"
cd .. || exit 2
cat "$W/summary.txt"
