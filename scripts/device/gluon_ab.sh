#!/usr/bin/env bash
# The int4 Gluon kernel of this tree against the one before it (OVERLAY, default out/ab_gluon: int4_gluon.py
# before, overlaid on a copy of this tree): benchmarks/int4_gluon.py at ROWS (default 64 128 256; every launch
# shape, each checked against the dequantized weight first), old then new; Llama-3.1-8B rtn-int4 decode steps
# at BATCHES (default 64 128 256), old / new / new / old, and bf16 once (BF16=0: not); then the Gluon and int4
# GPU tests of this tree. The tarball is rewritten after each part, so a call cut short keeps what ran.
# Carry "out" and ".whl". Results in $OUT/gluon_ab.tgz. (kernels_h100/gluon_sum/ came from its first version,
# gluon_sum_ab.sh, with the same parts less the per-part tarball.)
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
OVERLAY=${OVERLAY:-out/ab_gluon} overlay_tree
pack() { tar -czf "$OUT/gluon_ab.tgz" -C "$RES" .; }
bench() {  # bench NAME old|new
  local dir
  dir=$(tree_dir "$2")
  part "bench_$1" 150 env -C "$dir" PYTHONPATH="$dir:/tmp/site" python3 benchmarks/int4_gluon.py \
    --rows ${ROWS:-64 128 256} --output "$RES/int4_gluon_$1.json"
  pack
}
decode() {  # decode NAME old|new [ARGS]
  local name=$1 dir
  dir=$(tree_dir "$2")
  shift 2
  part "decode_$name" 120 env -C "$dir" PYTHONPATH="$dir:/tmp/site" python3 benchmarks/decode_latency.py \
    --models llama-3.1-8b --batch-sizes ${BATCHES:-64 128 256} --output "$RES/decode_$name.json" "$@"
  pack
}
bench old old
bench new new
decode int4_old_1 old --quantization rtn-int4
decode int4_new_1 new --quantization rtn-int4
decode int4_new_2 new --quantization rtn-int4
decode int4_old_2 old --quantization rtn-int4
[ "${BF16:-1}" != 0 ] && decode bf16 new
part tests 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
  -k "gluon or (int4 and (graph_replays or real_shapes))"
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
pack
cat "$RES/summary.txt" "$RES/decode_table.txt"
