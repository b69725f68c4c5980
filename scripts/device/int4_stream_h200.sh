#!/usr/bin/env bash
# The balanced ("stream-K") int4 launch for decode rows (benchmarks/int4_stream_decode.py) on one H100/H200;
# results in one tarball $OUT/int4_stream.tgz, rewritten after each part (a call cut short keeps what it
# finished). It reads no carried path (only torch and Triton beyond this tree; a carried ".whl" is installed as
# usual, "out" is not read). About 2-3 minutes, at most 6 (the parts' limits):
#   bash scripts/device/int4_stream_h200.sh
# Parts:
#   1. compile  every variant compiled for sm_90: registers, spills, shared memory, programs an SM, its loop
#   2. time     Llama-3.1-8B's and Qwen3-0.6B's four linears at 1, 8 and 16 rows: the engine's int4 launch
#               (the tile table's) and every variant x program count, each checked against the reference,
#               from CUDA-graph replays (int4_stream.json: us, TB/s, best per shape, a step's linears)
#   3. check    every variant x program count at those shapes and 1, 3, 16 rows: the reference, a repeat's
#               bits, two CUDA-graph replays' bits, zeroed counters (int4_stream_check.json)
source scripts/device/common.sh
: "${OUT:?set OUT}"
start_run
export TRITON_DEFAULT_FP_FUSION=1
pack() { tar -czf "$OUT/int4_stream.tgz" -C "$RES" .; }
part compile 60 python3 benchmarks/int4_stream_timing.py --compile-only
pack
part time 200 python3 benchmarks/int4_stream_timing.py --output "$RES/int4_stream.json"
pack
part check 80 python3 benchmarks/int4_stream_timing.py --check --output "$RES/int4_stream_check.json"
pack
cat "$RES/summary.txt"
