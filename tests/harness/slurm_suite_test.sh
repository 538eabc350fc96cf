#!/usr/bin/env bash
# slurm.suite and slurm.suite_cancel (called by slurm_test.sh with a local Slurm up and
# SLURM_CONF exported; it stops the daemons after):
#   slurm_suite_test.sh FAULTLINE_BIN SOURCE_DIR CASE TMP
set -euo pipefail
faultline=$1 src=$2 case=$3 tmp=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/harness/history_lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FAULTLINE_SLURM_POLL_MS=500

if [[ $case == suite ]]; then
  # Two fast scenarios and their fixes: four runs, every one must pass both ways.
  cat >"$tmp/suite.yaml" <<Y
name: slurmsmall
scenarios: ["$src/scenarios/symptoms/1.2-plugin-import-failure.yaml",
            "$src/scenarios/symptoms/5.3-different-prompts-on-tp-ranks.yaml"]
fix: true
Y
  # Bad input against the real cluster: exit 2, no job, no suite directory.
  set +e
  out=$("$faultline" suite "$tmp/suite.yaml" --executor slurm --partition nope \
    --results "$tmp/bad" 2>&1)
  status=$?
  set -e
  echo "$out"
  [[ $status -eq 2 ]] || fail "--partition nope: exit $status, want 2"
  grep -q "partition 'nope': no such partition (partitions: local)" <<<"$out" || fail "no clear error"
  [[ -z $(squeue -h) ]] || fail "a job was submitted"
  [[ ! -e $tmp/bad ]] || fail "a suite directory for a refused suite"

  t0=$(date +%s.%N)
  "$faultline" suite "$tmp/suite.yaml" --results "$tmp/local" -j 2 || fail "the local suite failed"
  t1=$(date +%s.%N)
  # --overcommit: 2-rank scenarios on a node with fewer CPUs than the array's tasks need.
  "$faultline" suite "$tmp/suite.yaml" --executor slurm --overcommit --time-limit 5 \
    --results "$tmp/slurm" || fail "the slurm suite failed"
  t2=$(date +%s.%N)
  echo "wall: local $(echo "$t1 - $t0" | bc) s, slurm $(echo "$t2 - $t1" | bc) s"
  local_dir=$(ls -d "$tmp"/local/*-slurmsmall) slurm_dir=$(ls -d "$tmp"/slurm/*-slurmsmall)
  python3 - "$local_dir" "$slurm_dir" <<'PY'
import json, os, sys
loc, slu = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
o = lambda s: {c["id"]: c["outcome"] for c in s["cases"]}
assert len(o(loc)) == 4 and o(loc) == o(slu), (o(loc), o(slu))
assert set(o(slu).values()) == {"pass"}, o(slu)
assert slu["selection"]["executor"] == "slurm" and loc["selection"]["executor"] == "local"
jobs = slu["slurm"]["jobs"]
assert len(jobs) == 1 and jobs[0]["tasks"] == 4, jobs
for c in slu["cases"]:
    d = c["run_dir"]
    assert d.startswith(sys.argv[2] + "/runs/"), d
    assert json.load(open(d + "/verdict.json"))["outcome"] == "pass", d
    assert os.path.getsize(d + ".log") > 0, d
    task = c["attempts"][0]["slurm_task"]
    assert task.startswith(jobs[0]["id"] + "_") and task.endswith(" COMPLETED"), task
print("same outcomes:", o(slu))
PY
  # Timings differ with the load (never asserted): the outcomes must not.
  "$faultline" diff --outcomes-only "$local_dir" "$slurm_dir" || fail "faultline diff found a regression"
  "$faultline" report "$slurm_dir" >/dev/null || fail "no report of the slurm suite"
  [[ $(junit_attr "$slurm_dir/junit.xml" tests) == 4 ]] || fail "junit.xml"
  exit 0
fi

# suite_cancel: one quick case and one that runs until Slurm cancels its task.
mkdir -p "$tmp/s"
cat >"$tmp/s/quick.yaml" <<Y
name: quick
topology: {ranks: 1}
workload: {steps: 2}
expect: {oracle: completed}
Y
cat >"$tmp/s/long.yaml" <<Y
name: long
topology: {ranks: 1}
workload: {kind: command, command: [sleep, "600"], probe: false}
expect: {oracle: completed}
Y
"$faultline" suite "$tmp/s" --executor slurm --results "$tmp/r" >"$tmp/suite.out" 2>&1 &
pid=$!
# The long case's array task (index 0: the cases go in file order), once it runs (at most 60 s).
task=
for _ in $(seq 120); do
  task=$(squeue -h -t RUNNING -o '%i' | grep '_0$' | head -1 || true)
  [[ -n $task ]] && break
  sleep 0.5
done
[[ -n $task ]] || { kill "$pid"; fail "the long task never ran"; }
sleep 1
scancel "$task"
set +e
wait "$pid"
status=$?
set -e
cat "$tmp/suite.out"
[[ $status -eq 1 ]] || fail "exit $status, want 1 (a case failed)"
python3 - "$(ls -d "$tmp"/r/*-s)" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
by = {c["scenario"]: c for c in s["cases"]}
assert by["quick"]["outcome"] == "pass", by["quick"]
c = by["long"]
assert c["outcome"] == "error", c
job = s["slurm"]["jobs"][0]["id"]
assert re.search(r"^Slurm array task %s_0 \(long seed \d+\) ended CANCELLED" % job,
                 c["explanation"]), c["explanation"]
print("cancelled:", c["explanation"])
PY

# SIGTERM to the suite itself: it cancels its array, the running case ends interrupted, the
# summary is written (exit 4) and no job of it is left.
"$faultline" suite "$tmp/s" --executor slurm --only long --results "$tmp/t" >"$tmp/term.out" 2>&1 &
pid=$!
for _ in $(seq 120); do
  [[ -n $(squeue -h -t RUNNING -o '%i') ]] && break
  sleep 0.5
done
sleep 1
kill -TERM "$pid"
set +e
wait "$pid"
status=$?
set -e
cat "$tmp/term.out"
[[ $status -eq 4 ]] || fail "SIGTERM to the suite: exit $status, want 4"
[[ -z $(squeue -h) ]] || fail "a task of the interrupted suite is left"
python3 - "$(ls -d "$tmp"/t/*-s)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert s["interrupted"] == "SIGTERM", s["interrupted"]
c = s["cases"][0]
assert c["outcome"] == "interrupted", c
assert "the suite got SIGTERM; Slurm array task" in c["explanation"], c["explanation"]
print("interrupted:", c["explanation"])
PY
