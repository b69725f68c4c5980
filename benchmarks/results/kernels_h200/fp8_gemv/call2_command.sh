source scripts/device/common.sh; start_run; export TRITON_DEFAULT_FP_FUSION=1; overlay_tree
for round in 1 2; do for tree in old new; do
  dir=$NEW; [ "$tree" = old ] && dir=$OLD
  for table in old new; do
  (cd "$dir" && part d_${tree}k_${table}t_$round 150 env PYTHONPATH="/tmp/site:$dir" MOPT_QUANT_TILES="$NEW/out/table_$table.json" \
    python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization fp8 --batch-sizes 1 --output "$RES/decode_${tree}k_${table}t_$round.json")
  done
done; done
decode_table "$RES"; tar -czf "$OUT/ab.tgz" -C "$RES" .
