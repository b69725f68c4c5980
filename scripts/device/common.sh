# Sourced by scripts/device/*_h200.sh: what their GPU runs share.

install_wheels() {  # the packages the GPU machine lacks, from .whl/ when it is there, into /tmp/site
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
}

part() {  # part NAME SECONDS COMMAND...: run with a limit, log to $RES/NAME.log, never stop the script
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  echo "[$SECONDS s] $name: exit $rc" | tee -a "$RES/summary.txt"
  tail -4 "$RES/$name.log" >> "$RES/summary.txt"
}
