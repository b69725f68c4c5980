#!/usr/bin/env bash
# The Gluon int4 kernel on one H200: decode steps with the tile table before it (out/ab/pkg.json) and
# with its gluon entries (out/ab/new.json), alternated, bf16 beside them, and its GPU tests; results
# straight into $OUT (a call cut short keeps the parts it finished). Carry "out" and ".whl":
#   git show BASE:model_optimizer/runtime/kernels/quant_tiles.json > out/ab/pkg.json
#   cp model_optimizer/runtime/kernels/quant_tiles.json out/ab/new.json
#   bash scripts/device/int4_gluon_h200.sh
# BATCHES (default 32 64 128 256); ROWS: also benchmarks/int4_gluon.py at these rows.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
RES=$OUT
export TRITON_DEFAULT_FP_FUSION=1
decode() {  # decode NAME TABLE QUANT
  part "decode_$1" 90 env ${2:+MOPT_QUANT_TILES=out/ab/$2.json} python3 benchmarks/decode_latency.py \
    --models llama-3.1-8b --quantization "$3" --batch-sizes ${BATCHES:-32 64 128 256} --output "$RES/decode_$1.json"
}
decode pkg_1 pkg rtn-int4
decode new_1 new rtn-int4
part tests 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
  -k "gluon or (int4 and (graph_replays or real_shapes))"
[ -n "${ROWS:-}" ] && part bench 90 python3 benchmarks/int4_gluon.py --rows $ROWS --output "$RES/int4_gluon.json"
decode bf16 "" none
decode new_2 new rtn-int4
decode pkg_2 pkg rtn-int4
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
cat "$RES/summary.txt" "$RES/decode_table.txt"
