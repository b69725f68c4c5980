#!/usr/bin/env bash
# Two trees' fp8 GEMV at one row, on one H200, one tarball $OUT/fp8_gemv.tgz: "new" is this checkout,
# "old" it with the files of out/ab over it (common.sh overlay_tree; name `out` in the call's carry).
# Used with deadefa (e4m3 bytes widened by bit operations) as "new" against 912737f's quant_kernels.py
# (F2F conversions); the kernel-by-table call after it is benchmarks/results/kernels_h200/fp8_gemv/
# call2_command.sh. From the repository root:
#   bash scripts/device/fp8_gemv_h200.sh
# Parts:
#   1. sweep_old, sweep_new  benchmarks/quant_kernels.py --sweep --kinds fp8 at one row (Llama-3.1-8B and
#                            Qwen3-0.6B shapes), each merged over a copy of the packaged table
#   2. decode_*              benchmarks/decode_latency.py at batch 1, fp8: old tree with its table, new tree
#                            with its table, twice in turn (Llama-3.1-8B and Qwen3-0.6B)
#   3. tests                 the fp8 tests of tests/gpu/test_quant_kernels_gpu.py with the new table
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
overlay_tree
for tree in old new; do
  dir=$(tree_dir "$tree")
  cp model_optimizer/runtime/kernels/quant_tiles.json "$RES/table_$tree.json"
  (cd "$dir" && part sweep_$tree 150 env PYTHONPATH="/tmp/site:$dir" python3 benchmarks/quant_kernels.py --sweep \
    --kinds fp8 --m 1 --methods fp8 --tiles-output "$RES/tiles_$tree.json" --merge-into "$RES/table_$tree.json" \
    --output "$RES/sweep_$tree.json")
done
for round in 1 2; do
  for tree in old new; do
    dir=$(tree_dir "$tree")
    (cd "$dir" && part decode_${tree}_$round 150 env PYTHONPATH="/tmp/site:$dir" MOPT_QUANT_TILES="$RES/table_$tree.json" \
      python3 benchmarks/decode_latency.py --models llama-3.1-8b qwen3-0.6b --quantization fp8 --batch-sizes 1 \
      --output "$RES/decode_${tree}_$round.json")
  done
done
part tests 200 env MOPT_QUANT_TILES="$RES/table_new.json" python3 -m pytest -q -p no:cacheprovider \
  --junitxml="$RES/gpu_tests_fp8.xml" tests/gpu/test_quant_kernels_gpu.py -k fp8
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/fp8_gemv.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
