# Shared by .ci/run (every landing) and .ci/nightly: named steps, their wall times, and the
# failed steps named last. Sourced, not run.
status=0
failed_steps=()
step_times=()
# A failing step is recorded by name and the run goes on; the names are printed last, so the
# tail of the log says which steps failed.
failed() { status=1; failed_steps+=("$1"); echo "CI STEP FAILED: $1"; }
# step NAME CMD...: runs CMD under a heading, records its wall time (printed in the closing table).
step() {
  local name="$1" started=$SECONDS
  shift
  echo "== $name"
  "$@" || failed "$name"
  step_times+=("$(printf '%5d s  %s' $((SECONDS - started)) "$name")")
}
# src/tests/test_report_chromium.py opens the HTML reports in a real headless Chromium: Debian's
# package. Without it that test fails under CI=true (skips elsewhere); a failed install fails
# the run here too.
ensure_chromium() {
  echo "== headless Chromium for the report test"
  if ! command -v chromium >/dev/null 2>&1; then
    local sudo="" started=$SECONDS
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    if $sudo apt-get update -q && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; then
      echo "chromium installed in $((SECONDS - started)) s"
    else
      echo "ERROR: installing chromium failed; src/tests/test_report_chromium.py fails without it (CI=true)"
      failed "headless Chromium"
    fi
  fi
  chromium --version || failed "headless Chromium for the report test"
}
# finish: the wall time per step, the failed steps, and the exit status.
finish() {
  echo "== wall time per step (${SECONDS} s in all)"
  printf '%s\n' "${step_times[@]}"
  if (( status )); then
    echo "== CI failed: ${#failed_steps[@]} step(s): ${failed_steps[*]}"
  else
    echo "== CI passed: every step"
  fi
  exit $status
}
