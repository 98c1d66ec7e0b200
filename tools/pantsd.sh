# Sourced by the scripted checks (tools/check-*): run their Pants calls with pantsd, and stop on
# exit the daemons they started. A Pants call without pantsd pays ~10-30 s of start-up on 2 cores
# (CI=true turns pantsd off in ./pants); with it, a few seconds after the first.
#
#   use_pantsd DIR   # DIR's Pants calls use pantsd from now on; a daemon DIR did not already
#                    # have is stopped when the script exits (stop_started_pantsds, on EXIT)
# Callers that set their own EXIT trap call stop_started_pantsds in it.
export PANTS_PANTSD=true
_started_in=()

_pantsd_pid() { cat "$1"/.pids/*/pantsd/pid 2>/dev/null | head -1 || true; }

use_pantsd() {
  local had
  had="$(_pantsd_pid "$1")"
  [[ -n "$had" ]] && kill -0 "$had" 2>/dev/null || _started_in+=("$1")
}

# Waits (up to 20 s) for each daemon to be gone: a script run next would otherwise take a daemon
# still shutting down for one it did not start, and leave the one its own first call starts.
stop_started_pantsds() {
  local dir pid i
  for dir in "${_started_in[@]}"; do
    pid="$(_pantsd_pid "$dir")"
    [[ -n "$pid" ]] || continue
    kill "$pid" 2>/dev/null || continue
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
  done
}
trap stop_started_pantsds EXIT
