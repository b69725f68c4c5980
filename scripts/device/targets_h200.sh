#!/usr/bin/env bash
# Two unmet targets re-measured in one device call (~7 min; each part under a limit, the tarball rewritten
# after each, so a call cut short keeps what finished):
#   1. [kernels] offline throughput, Llama-3.1-8B dummy weights (nano-vllm's workload): bf16, rtn-int4,
#      rtn-int4, bf16 (alternated: the host's drift shows in the two bf16 runs)                  <= 4 x 110 s
#   2. [structured] the c=64 TPOT ratio of benchmarks/structured.py (mopt serve + mopt bench, Qwen3-0.6B
#      dummy, the order schema against unconstrained, three alternating pairs)                   <= 60 + 150 s
# Carry ".whl" (llguidance and the server's packages). Results in $OUT/targets.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
pack() { tar -czf "$OUT/targets.tgz" -C "$RES" .; }
throughput() {  # throughput NAME ARGS...
  local name=$1
  shift
  part "throughput_$name" 110 python3 benchmarks/throughput.py --model llama-3.1-8b --hf-requests 0 "$@" \
    --output "$RES/throughput_$name.json"
  grep -E "^ours" "$RES/throughput_$name.log" | sed "s/^/$name /" >> "$RES/summary.txt"
  pack
}
throughput bf16_1
throughput int4_1 --quantization rtn-int4
throughput int4_2 --quantization rtn-int4
throughput bf16_2
MODEL=$(mktemp -d)
part bpe_tokenizer 60 env -C benchmarks python3 bpe_tokenizer_model.py configs/qwen3-0.6b "$MODEL"
part structured_bench 150 env -C benchmarks python3 structured.py --model "$MODEL" --concurrency 64 \
  --output-len 256 --offline-steps 100 --repeats 3 --output "$RES/structured_h200.json" -- \
  --load-format dummy --dtype bfloat16
pack
cat "$RES/summary.txt"
