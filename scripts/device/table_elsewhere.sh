#!/usr/bin/env bash
# An sm_90 GPU without a tile table of its own (an H100): decode steps of Llama-3.1-8B with the default
# rule (int4: Gluon at 17-256 rows; "old": $MOPT_INT4_GLUON=0, our Triton program's default tiles), and
# with the packaged table (measured on an H200) renamed to this GPU, int4 and $QUANTS, alternated, twice;
# then the Gluon int4 bench at ROWS against the default rule. All results in $OUT/table_elsewhere.tgz.
# BATCHES (default 1 16 64 256), ROWS (default 32 128), ROUNDS (default 2), QUANTS (the formats beside int4,
# default fp8); TESTS=1: also the int4 GPU tests; SKIP_PARTS (common.sh) leaves parts out.
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
empty_table
python3 - <<'PY'
import json, torch
from model_optimizer.runtime.kernels.quant_tiles import PACKAGED_TABLE
table = json.loads(PACKAGED_TABLE.read_text())
table["gpu"] = torch.cuda.get_device_name()
open("out/ab/here.json", "w").write(json.dumps(table))
PY
decode() {  # decode NAME TABLE QUANT [GLUON]
  part "decode_$1" 120 env MOPT_QUANT_TILES="out/ab/$2.json" MOPT_INT4_GLUON="${4:-1}" python3 \
    benchmarks/decode_latency.py --models llama-3.1-8b --quantization "$3" --batch-sizes ${BATCHES:-1 16 64 256} \
    --output "$RES/decode_$1.json"
}
for round in $(seq "${ROUNDS:-2}"); do
  decode "old_int4_$round" none rtn-int4 0
  decode "none_int4_$round" none rtn-int4
  decode "here_int4_$round" here rtn-int4
done
for quant in ${QUANTS:-fp8}; do
  decode "none_$quant" none "$quant"
  decode "here_$quant" here "$quant"
done
part decode_bf16 90 python3 benchmarks/decode_latency.py --models llama-3.1-8b --quantization none \
  --batch-sizes ${BATCHES:-1 16 64 256} --output "$RES/decode_bf16.json"
part bench 120 env MOPT_QUANT_TILES=out/ab/none.json python3 benchmarks/int4_gluon.py --rows ${ROWS:-32 128} \
  --output "$RES/int4_gluon.json"
[ -n "${TESTS:-}" ] && part tests 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_quant_kernels_gpu.py -k int4
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/table_elsewhere.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
