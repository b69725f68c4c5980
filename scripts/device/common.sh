# Sourced by scripts/device/*_h200.sh: what their GPU runs share.

install_wheels() {  # the packages the GPU machine lacks, from .whl/ when it is there, into /tmp/site
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
}

part() {  # part NAME SECONDS COMMAND...: run with a limit, log to $RES/NAME.log, never stop the script;
  local name=$1 limit=$2  # a NAME listed in SKIP_PARTS (space-separated) is skipped: parts another script runs
  shift 2
  case " ${SKIP_PARTS:-} " in
    *" $name "*) echo "[$SECONDS s] $name: skipped (SKIP_PARTS)" | tee -a "$RES/summary.txt"; return 0 ;;
  esac
  timeout "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  echo "[$SECONDS s] $name: exit $rc" | tee -a "$RES/summary.txt"
  tail -4 "$RES/$name.log" >> "$RES/summary.txt"
}

start_run() {  # the environment of a run from the repository root, and RES: a fresh folder for its results,
  install_wheels  # already holding gpu.txt (the GPU, driver, memory) and commit.txt
  export PYTHONUNBUFFERED=1 COLUMNS=200 HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
  RES=$(mktemp -d)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RES/gpu.txt" 2>&1 || true
  git rev-parse HEAD > "$RES/commit.txt" 2>/dev/null || true
}

empty_table() {  # out/ab/none.json: a tile table for this GPU without entries (every shape on the default rule)
  mkdir -p out/ab
  python3 - <<'PY'
import json, torch
from model_optimizer.runtime.kernels.quant_tiles import TABLE_VERSION
open("out/ab/none.json", "w").write(json.dumps({"gpu": torch.cuda.get_device_name(), "version": TABLE_VERSION,
                                                 "entries": {}}))
PY
}

decode_table() {  # decode_table FOLDER: each decode_*.json there as ms/step, graph ms and its decode graph's kernels
  python3 - "$1" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("decode_*.json")):
    d = json.loads(f.read_text())
    for r in d["rows"]:
        print(f"{f.stem:40s} b{r['batch']:<3} {r['ms_per_step']:.3f} ms/step  graph {r['graph_ms']:.3f} ms")
    for name, ks in d.get("kernels", {}).items():
        launches = sum(k["calls_per_replay"] for k in ks)
        print(f"  {name}: {launches:.0f} launches per replay; " + ", ".join(
            f"{k['kernel'][:26]} {k['calls_per_replay']:.0f}x{k['us_per_call']:.1f}" for k in ks[:14]))
PY
}

SERVE_QWEN3=(python3 -m model_optimizer.cli.main serve --model benchmarks/configs/qwen3-0.6b --load-format dummy
             --dtype bfloat16 --port 8123)  # the start-up benchmarks' server: Qwen3-0.6B, dummy weights

serve_ready_s() {  # serve_ready_s T0: seconds from T0 (date +%s.%N) until :8123/ready answers 200 (at most 120)
  python3 - "$1" <<'PY'
import sys, time, urllib.request
t0 = float(sys.argv[1])
while time.time() - t0 < 120:
    try:
        if urllib.request.urlopen("http://127.0.0.1:8123/ready", timeout=1).status == 200:
            print(f"{time.time() - t0:.2f}"); break
    except Exception:
        time.sleep(0.05)
PY
}

stop_serve() {  # SIGINT to the server, then wait until its port is free
  pkill -INT -f "model_optimizer.cli.main serve"; sleep 3; pkill -9 -f "model_optimizer.cli.main serve"; sleep 1
}

keep_bytecode() {  # Python keeps bytecode between starts, as an installed package has it (this machine's image
  unset PYTHONDONTWRITEBYTECODE  # ships torch without .pyc files and runs Python with bytecode writing off)
  export PYTHONPYCACHEPREFIX=/tmp/pyc
}

overlay_tree() {  # NEW=this checkout, OLD=a copy of it with the files of $OVERLAY (default out/ab, ignored by
  OVERLAY=${OVERLAY:-out/ab}  # git, named in the call's carry) over it; old_status.txt and host.txt into $RES
  [ -d "$OVERLAY" ] || { echo "no overlay folder $OVERLAY: carry it (the device call's carry)" >&2; exit 2; }
  NEW=$PWD OLD=$(mktemp -d)
  tar -c --exclude=./.venv --exclude=./.whl . | tar -x -C "$OLD" && cp -a "$OVERLAY/." "$OLD/"
  (cd "$OLD" && git status --short) > "$RES/old_status.txt" 2>&1
  host_info
}

tree_dir() {  # tree_dir old|new: the folder of that tree (overlay_tree)
  if [ "$1" = old ]; then echo "$OLD"; else echo "$NEW"; fi
}

host_info() {  # the host's CPUs and load into $RES/host.txt: runs on different hosts differ by their CPU work
  (lscpu | head -20; uptime) > "$RES/host.txt"
}
