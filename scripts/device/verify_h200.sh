#!/usr/bin/env bash
# Two device calls measuring this session's changes and running their GPU tests.
#   a (2 GPUs, ~9.5 min): GPU 0: the quantized-matmul tile sweep timed as GPU time (its table in
#     $W/quant/quant_tiles.json), Llama-3.1-8B decode per method with that table and each graph's
#     kernels, the quantized-kernel GPU tests. GPU 1: cold and warm start (benchmarks/cold_start.py), the
#     serving benchmark at rate inf with and without logprobs (benchmarks/serving.py), decode ms/step and offline
#     throughput, the engine GPU tests.
#   b (1 GPU, ~5 min, after committing the table as model_optimizer/runtime/kernels/quant_tiles.json): Qwen3-0.6B
#     decode per method, offline throughput bf16 / fp8 KV / fp8 weights + fp8 KV, the attention kernels
#     (bf16 vs fp8 cache), the fused element-wise kernels, the remaining GPU tests.
# Usage on the device, from the repository root: W=/tmp/w bash scripts/device/verify_h200.sh a|b
set -uo pipefail
W=${W:-/tmp/w}
BUDGET=${BUDGET:-560}
mkdir -p "$W/quant" "$W/perf" "$W/tests"
if ls .whl/*.whl >/dev/null 2>&1; then  # once, before anything imports from it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH PYTHONPATH="$PWD:/tmp/site"
export TRITON_DEFAULT_FP_FUSION=1
log() { echo "[$SECONDS s] $*" | tee -a "$W/parts.txt"; }
left() { echo $(( BUDGET - SECONDS )); }
part() {  # part DIR NAME SECONDS COMMAND...: skipped when under 20 s are left
  local dir=$1 name=$2 limit=$3; shift 3
  local room; room=$(left)
  if [ "$room" -lt 20 ]; then log "$name skipped (time)"; return; fi
  [ "$limit" -gt "$room" ] && limit=$room
  timeout "$limit" "$@" > "$W/$dir/$name.log" 2>&1; log "$name exit $? ($limit s allowed)"
}
tests() {  # tests NAME SECONDS FILES...
  local name=$1 limit=$2; shift 2
  part tests "$name" "$limit" python3 -m pytest -q -p no:cacheprovider --timeout 120 --junitxml="$W/tests/$name.xml" "$@"
}

sweep_gpu0() {  # call a, GPU 0: the tile sweep (GPU time), then Llama decode per method with its table
  export CUDA_VISIBLE_DEVICES=0
  part quant kernels 400 python3 benchmarks/quant_kernels.py --sweep --tiles-output "$W/quant/quant_tiles.json" \
    --m 1 8 64 --output "$W/quant/quant_kernels.json"
  [ -s "$W/quant/quant_tiles.json" ] && export MOPT_QUANT_TILES="$W/quant/quant_tiles.json"
  part quant decode_llama 110 python3 benchmarks/decode_latency.py --models llama-3.1-8b \
    --quantization rtn-int4 fp8 none int8 --profile --output "$W/quant/decode_llama.json"
  tests quant_kernel_tests 120 tests/gpu/test_quant_kernels_gpu.py
}

perf_gpu1() {  # call a, GPU 1: start-up, serving, decode and offline speed, engine tests
  export CUDA_VISIBLE_DEVICES=1
  local model=/tmp/qwen3-word
  python3 benchmarks/word_tokenizer_model.py benchmarks/configs/qwen3-0.6b "$model"
  cd benchmarks || return
  part perf cold_start 100 python3 cold_start.py --runs 1 --no-llm --no-tokenizer --output "$W/perf/cold_start_h200.json" -- \
    --model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16
  cd ..
  cd benchmarks || return
  part perf serving 110 python3 serving.py --num-requests 1000 --prompt-len 512 --output-len 128 \
    --with-and-without-logprobs --logprobs 5 --output "$W/perf/serving_h200.json" -- \
    --model benchmarks/configs/qwen3-0.6b --load-format dummy --dtype bfloat16
  part perf decode 60 python3 decode_latency.py --output "$W/perf/decode_latency_h200.json"
  part perf throughput 40 python3 throughput.py --hf-requests 0 --output "$W/perf/throughput_h200.json"
  cd ..
  tests engine_tests 150 tests/gpu/test_perf_gpu.py tests/gpu/test_startup_log_gpu.py tests/gpu/test_engine_gpu.py \
    tests/gpu/test_graphs_gpu.py
}

rest_gpu() {  # call b, one GPU: Qwen decode per method, fp8 throughput, attention and fused kernels, tests
  [ -f "$TILES" ] && export MOPT_QUANT_TILES="$TILES"
  part quant decode_qwen 60 python3 benchmarks/decode_latency.py --models qwen3-0.6b --profile \
    --quantization rtn-int4 fp8 none int8 --output "$W/quant/decode_qwen.json"
  for run in "bf16" "kv_fp8 --kv-cache-dtype fp8" "fp8 --quantization fp8 --kv-cache-dtype fp8"; do
    set -- $run
    local name=$1; shift
    part quant "throughput_$name" 45 python3 benchmarks/throughput.py --hf-requests 0 "$@" \
      --output "$W/quant/throughput_$name.json"
  done
  part quant attention_kernels 60 python3 benchmarks/attention_kernels.py --no-sweep --output "$W/quant/attention_kernels.json"
  part quant fused_ops 30 python3 benchmarks/fused_ops.py --output "$W/quant/fused_ops_h200.json"
  tests rest_tests 200 tests/gpu/test_warmup_gpu.py tests/gpu/test_fused_ops_gpu.py tests/gpu/test_quant_engine_gpu.py \
    tests/gpu/test_quantized_encoder_gpu.py tests/gpu/test_quant_embed_gate_gpu.py
}

case "${1:-a}" in
  a) sweep_gpu0 & perf_gpu1; wait ;;
  b) TILES=${TILES:-model_optimizer/runtime/kernels/quant_tiles.json} rest_gpu ;;
  *) echo "usage: $0 a|b" >&2; exit 2 ;;
esac
python3 - "$W" <<'PY' > "$W/tests/summary.txt" 2>&1
import sys, xml.etree.ElementTree as ET
from pathlib import Path
for xml in sorted(Path(sys.argv[1], "tests").glob("*.xml")):
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root[0]
    print(xml.stem, {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")})
    for case in suite.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            print("  FAILED", case.get("classname"), case.get("name"), (bad.get("message") or "")[:400])
PY
cat "$W/parts.txt" "$W/tests/summary.txt"
