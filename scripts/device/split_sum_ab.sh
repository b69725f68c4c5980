#!/usr/bin/env bash
# Our Triton program's split-K sum unrolled by four on decode tiles (this tree) against the loop before it
# (OVERLAY, default out/ab_split: quant_kernels.py of main, overlaid on a copy of this tree): Llama-3.1-8B and
# Qwen3-0.6B decode steps at BATCHES (default 1 2 4 8 16) for rtn-int4, fp8 and int8, old / new / new / old;
# then the quantized kernels' GPU tests of this tree. Carry "out" and ".whl". Results in $OUT/split_sum_ab.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
OVERLAY=${OVERLAY:-out/ab_split} overlay_tree
decode() {  # decode NAME old|new
  local dir
  dir=$(tree_dir "$2")
  for q in ${QUANTS:-rtn-int4 fp8 int8}; do
    part "decode_${q}_$1" 150 env -C "$dir" PYTHONPATH="$dir:/tmp/site" python3 benchmarks/decode_latency.py \
      --models ${MODELS:-llama-3.1-8b qwen3-0.6b} --quantization "$q" --batch-sizes ${BATCHES:-1 2 4 8 16} \
      --output "$RES/decode_${q}_$1.json"
  done
  tar -czf "$OUT/split_sum_ab.tgz" -C "$RES" .
}
decode old_1 old
decode new_1 new
decode new_2 new
decode old_2 old
[ "${TESTS:-1}" = 1 ] && part tests 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/split_sum_ab.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
