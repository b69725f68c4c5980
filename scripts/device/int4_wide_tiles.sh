#!/usr/bin/env bash
# int4 decode steps at 128 and 256 rows with the tile table before (out/ab/new.json: Triton entries at 128
# rows, unsplit Gluon at 256) and the packaged one (those entries left to the default rule: wide Gluon tiles
# split to one wave), alternated twice, and once with an empty table (the default rule everywhere).
# Carry "out" and ".whl"; BATCHES (default 128 256); TESTS=1: also the int4 GPU tests of the kernels; ROWS:
# also benchmarks/int4_gluon.py at these rows. Results in $OUT/int4_wide_tiles.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
empty_table
decode() {  # decode NAME [TABLE]
  part "decode_$1" 120 env ${2:+MOPT_QUANT_TILES=$2} python3 benchmarks/decode_latency.py --models llama-3.1-8b \
    --quantization rtn-int4 --batch-sizes ${BATCHES:-128 256} --output "$RES/decode_$1.json"
}
decode before_1 out/ab/new.json
decode after_1
decode after_2
decode before_2 out/ab/new.json
decode rule out/ab/none.json
[ -n "${TESTS:-}" ] && part tests 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
  -k "gluon or (int4 and (graph_replays or real_shapes))"
[ -n "${ROWS:-}" ] && part bench 120 python3 benchmarks/int4_gluon.py --rows $ROWS --output "$RES/int4_gluon.json"
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/int4_wide_tiles.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
