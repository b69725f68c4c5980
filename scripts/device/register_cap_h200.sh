#!/usr/bin/env bash
# Register caps (ptxas maxnreg) on the tile table's decode launches, one tarball $OUT/register_cap.tgz:
#   1. probe   scripts/device/register_cap_probe.py $PROBE_ARGS (default: Llama-3.1-8B's linears at the table's
#              launches for int4 at 1 / 8 / 16 rows and fp8 / int8 at 1 row, caps 96-64, two splits); writes
#              out/capped.json, the packaged table with the variants that won by 3% or more
#   2. decode  decode steps of MODELS (default llama-3.1-8b), the packaged table against out/capped.json,
#              alternated packaged / capped / capped / packaged, for each QUANT:BATCHES of DECODE
#              (default "rtn-int4:1,8,16 fp8:1 int8:1")
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
mkdir -p out
# shellcheck disable=SC2086  # PROBE_ARGS is a list of arguments
part probe "${PROBE_S:-330}" python3 scripts/device/register_cap_probe.py "$RES/probe.json" --table out/capped.json ${PROBE_ARGS:-}
cp out/capped.json "$RES/" 2>/dev/null
decode() {  # decode NAME TABLE|"": one run of each QUANT:BATCHES
  local table=$2 q batches
  for spec in ${DECODE:-rtn-int4:1,8,16 fp8:1 int8:1}; do
    q=${spec%%:*} batches=${spec#*:}
    part "decode_${q}_$1" 90 env ${table:+MOPT_QUANT_TILES=$table} python3 benchmarks/decode_latency.py \
      --models ${MODELS:-llama-3.1-8b} --quantization "$q" --batch-sizes ${batches//,/ } --output "$RES/decode_${q}_$1.json"
  done
  tar -czf "$OUT/register_cap.tgz" -C "$RES" .
}
if [ -f out/capped.json ]; then
  decode packaged_1 ""
  decode capped_1 out/capped.json
  decode capped_2 out/capped.json
  decode packaged_2 ""
fi
decode_table "$RES" > "$RES/decode_table.txt" 2>&1
tar -czf "$OUT/register_cap.tgz" -C "$RES" .
cat "$RES/summary.txt" "$RES/decode_table.txt"
