#!/usr/bin/env bash
# The Gluon int4 kernel's split-K for wide tiles (its split sum 32 tokens at a time, without spills): the
# quantized kernels' and engine's GPU tests (every Gluon launch shape of the sweep checked), then
# benchmarks/int4_gluon.py at ROWS (default 128 256), and at 64 rows also with the kernel and candidates of
# before (out/ab/old/int4_gluon.py and quant_tiles.py, overlaid on a copy of this tree) for the split
# launches the table takes at 64 rows. Carry "out" and ".whl". Results in $OUT/gluon_split.tgz.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
part tests 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
  tests/gpu/test_quant_engine_gpu.py
part bench 240 python3 benchmarks/int4_gluon.py --rows ${ROWS:-128 256} --output "$RES/int4_gluon.json"
OLD=$(mktemp -d)
cp -r model_optimizer benchmarks tests "$OLD"/
cp out/ab/old/int4_gluon.py out/ab/old/quant_tiles.py "$OLD/model_optimizer/runtime/kernels/"
part bench64_old 100 env -C "$OLD" PYTHONPATH="$OLD:/tmp/site" python3 benchmarks/int4_gluon.py --rows 64 \
  --output "$RES/int4_gluon_64_old.json"
part bench64_new 100 python3 benchmarks/int4_gluon.py --rows 64 --output "$RES/int4_gluon_64_new.json"
tar -czf "$OUT/gluon_split.tgz" -C "$RES" .
cat "$RES/summary.txt"
