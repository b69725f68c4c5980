#!/usr/bin/env bash
# The quantized kernels' and engine's GPU tests, then Nsight Compute over the int4 Gluon kernel's widest
# launches and cuBLAS bf16 at the same shapes (Llama-3.1-8B's gate_up and down at 128 and 256 rows):
# where the int4 tiles lose to bf16 above 128 rows. Clocks untouched. Results in $OUT/gluon_ncu.tgz.
#   bash scripts/device/gluon_ncu.sh            (NO_TESTS=1: the profiles alone)
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
if [ -z "${NO_TESTS:-}" ]; then
  part tests 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py \
    tests/gpu/test_quant_engine_gpu.py
fi
NCU=(ncu --clock-control none --launch-skip 2 --launch-count 1 --set detailed --import-source no)
# name, probe arguments (kind M N K [BLOCK_N BLOCK_M WARPS STAGES SPLITS])
PROBES=${PROBES:-"gate_up_256:gluon,256,28672,4096,128,256,8,3,1 bf16_gate_up_256:bf16,256,28672,4096
gate_up_128:gluon,128,28672,4096,256,128,8,3,1 bf16_gate_up_128:bf16,128,28672,4096
down_256:gluon,256,4096,14336,128,128,8,4,2 bf16_down_256:bf16,256,4096,14336"}
for p in $PROBES; do
  name=${p%%:*}; args=${p#*:}
  case $args in bf16*) regex="regex:gemm|nvjet|xmma|cutlass" ;; *) regex="regex:int4_mma_kernel" ;; esac
  part "ncu_$name" 150 "${NCU[@]}" -k "$regex" python3 scripts/device/gluon_probe.py ${args//,/ }
done
tar -czf "$OUT/gluon_ncu.tgz" -C "$RES" .
cat "$RES/summary.txt"
