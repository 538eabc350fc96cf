# shellcheck shell=bash
# Sourced by torch_test.sh and torchrun_test.sh: their arguments, the skip when the python3 has no
# torch, and the run of one scenario of scenarios/torch/ under the harness.
#   torch_args FAULTLINE_BIN SOURCE_DIR SCENARIO [--fix] [PYTHON]: sets faultline, src, scenario,
#     fix and py (default /usr/bin/python3).
#   need_torch MODULE WHAT: exits 77 (skipped) unless $py imports MODULE and torch.distributed
#     has gloo; WHAT says what was missing.
#   run_torch_scenario SHOW: runs the scenario (and its fix with --fix) as run id t into a fresh
#     $tmp, removed on exit; when the run fails, says so, calls SHOW (a function printing what
#     helps to see why) and exits 1.
torch_args() {
  faultline=$1
  src=$2
  scenario=$3
  fix=${4:-}
  py=${5:-/usr/bin/python3}
}

need_torch() {
  if ! "$py" -c "import $1, torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
    echo "SKIP: $py has no $2 (Debian: python3-torch)"
    exit 77
  fi
}

run_torch_scenario() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  local rc=0
  "$faultline" run "$src/scenarios/torch/$scenario.yaml" $fix --results "$tmp" --run-id t -q || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: faultline run $scenario $fix exited $rc"
    "$1" || true
    exit 1
  fi
}
