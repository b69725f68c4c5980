#!/usr/bin/env bash
# [structured] two trees' served TPOT ratio in one device call, their servers alternating, so that the host's
# drift falls on both: "new" is this checkout, "old" is it with the files of an overlay folder copied over it
# (default out/ab, ignored by git: put the old versions of the changed files there, e.g.
#   git show REV:path/to/file > out/ab/path/to/file
# and name `out` in the device call's carry). Each server run is benchmarks/structured.py at 64 requests,
# 256 tokens, 3 alternating pairs (its own plain run with the structured run's lengths, then structured).
#   ROUNDS=3 ORDER="new old" SCHEMA=order-unbounded bash scripts/device/structured_ab_h200.sh
# ~35-75 s per server run on the H200; one line per run, then $OUT/ab.tgz (JSON, logs, host.txt).
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
source "$(dirname "$0")/common.sh"
start_run
overlay_tree
MODEL=$(mktemp -d)
(cd benchmarks && python3 bpe_tokenizer_model.py configs/qwen3-0.6b "$MODEL" > "$RES/bpe.log" 2>&1)
for i in $(seq 1 "${ROUNDS:-2}"); do
  for tree in ${ORDER:-old new}; do
    dir=$(tree_dir "$tree")
    (cd "$dir/benchmarks" && PYTHONPATH="/tmp/site:$dir" timeout 150 python3 structured.py --model "$MODEL" \
      --schema "${SCHEMA:-order-unbounded}" --concurrency 64 --output-len 256 --offline-steps 10 --repeats 3 \
      --output "$RES/${tree}_$i.json" -- --load-format dummy --dtype bfloat16 > "$RES/${tree}_$i.log" 2>&1)
    echo "$tree $i: $(grep -h 'matched-length' "$RES/${tree}_$i.log") load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done | tee "$RES/summary.txt"
rm -rf "$MODEL" "$OLD"
tar -czf "$OUT/ab.tgz" -C "$RES" .
rm -rf "$RES"
echo "wrote $OUT/ab.tgz"
