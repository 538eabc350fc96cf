#!/usr/bin/env bash
# ctest torch.torchrun_*: one torchrun (launch: once, two workers, Debian's python3-torch on gloo)
# under the harness, and what it made of torchrun's conventions (issue 36): each worker's
# TORCHELASTIC_ERROR_FILE read after the job and the first failure named from it (bad-token);
# the worker the scenario killed told from the peer torchrun closed (killed-rank); the stopped
# worker alone named by the hang oracle, not the peer waiting for it (stopped-rank); one torchrun
# per node, each in its node's network namespace, and a link cut between them (two-nodes-link-cut,
# root only). The fix variants must pass with no failure named. Exit 77 (skipped) when the python3
# has no torch.
#   tests/harness/torchrun_test.sh FAULTLINE_BIN SOURCE_DIR SCENARIO [--fix] [PYTHON]
set -euo pipefail
. "$(dirname "$0")/torch_lib.sh"
torch_args "$@"
need_torch torch.distributed.run "torch with gloo and torchrun"
if [[ $scenario == *two-nodes* ]] && { [[ $EUID -ne 0 ]] || ! unshare --net true 2>/dev/null; }; then
  echo "SKIP: nodes as network namespaces need root (creating namespaces)"
  exit 77
fi
show_run() {
  cat "$tmp/t/verdict.json" || true
  tail -n 30 "$tmp/t/launcher.log"
}
run_torch_scenario show_run
"$py" - "$tmp/t" "$scenario" "$fix" <<'PY'
import json, os, sys
run, scenario, fix = sys.argv[1], sys.argv[2], sys.argv[3] == "--fix"
ev = [json.loads(l) for l in open(os.path.join(run, "history.jsonl"))]
verdict = json.load(open(os.path.join(run, "verdict.json")))
def harness(kind, rank=None):
    return [e for e in ev if e["source"] == "harness" and e["kind"] == kind
            and (rank is None or e["rank"] == rank)]
exits = {e["rank"]: e["data"] for e in harness("rank_exit")}
first = harness("first_failure")
print("verdict:", verdict["outcome"], verdict["ranks"], verdict["explanation"])
print("exits:", exits)
print("first failure:", [e["data"] for e in first])
if scenario == "torchrun-two-nodes-link-cut":
    # One torchrun per node, each its node's (launch events), every rank heard from; the nodes'
    # namespaces gone with the run.
    launches = {e["rank"]: e["data"] for e in harness("launch")}
    assert launches[0]["node"] == 0 and launches[1]["node"] == 1, launches
    assert launches[0]["pid"] != launches[1]["pid"], launches
    for n in (0, 1):
        argv = launches[n]["argv"]
        assert argv[argv.index("--node_rank") + 1] == str(n), argv
    hellos = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
    assert hellos == {0, 1}, hellos
    healed = [e["data"] for e in harness("fault_healed") if e["data"]["fault"] == "namespaces"]
    assert healed and healed[-1]["holders_left"] == 0, healed
    assert verdict["outcome"] == "pass", verdict
    if not fix:
        assert "all_reduce" in verdict["explanation"], verdict
    sys.exit(0)
if fix:
    assert verdict["outcome"] == "pass", verdict
    assert not first and not harness("worker_error"), (first, harness("worker_error"))
    sys.exit(0)
assert verdict["outcome"] == "pass" and verdict["ranks"] == [1], verdict
if scenario == "torchrun-bad-token":
    # Rank 1's own exception, from the error file torchrun's agent gave it (under the run's
    # torchrun --log_dir), with its traceback; rank 0's, if it wrote one, is later.
    err = {e["rank"]: e["data"] for e in harness("worker_error")}
    assert err[1]["message"] == "IndexError: index out of range in self", err
    assert err[1]["exception"] == "IndexError", err
    assert "in train" in err[1]["py_callstack"] and "vocab(torch.tensor([96]))" in \
        err[1]["py_callstack"], err[1]["py_callstack"]
    assert err[1]["file"].startswith(os.path.join(run, "torchrun") + "/"), err[1]["file"]
    assert err[1]["file"].endswith("/attempt_0/1/error.json"), err[1]["file"]
    assert first[0]["rank"] == 1 and first[0]["data"] == {
        "rank": 1, "how": "error_file", "message": "IndexError: index out of range in self"}, first
    assert verdict["first_failure"]["rank"] == 1, verdict
    # torchrun's own error file: the first failure as it saw it (@record on its main). Its error
    # files carry whole seconds, so when rank 0's broken connection lands in the same second
    # torchrun may pick either worker: its file must hold one of the workers' errors, and the
    # harness's first_failure above is what breaks the tie.
    tr = harness("torchrun_error")
    assert tr and tr[0]["data"]["message"] in {e["message"] for e in err.values()}, (tr, err)
    assert exits[1]["class"] == "error" and exits[1]["ended_by"].startswith(
        "its exception (error file): IndexError"), exits
elif scenario == "torchrun-killed-rank":
    # Rank 1 died of the scenario's SIGKILL; rank 0 either failed on its own afterwards (its
    # error file) or torchrun closed it (SIGTERM, its "closing signal" line): never a signal
    # death of its own.
    assert exits[1]["class"] == "signal" and exits[1]["code"] == 9 and exits[1]["signaled"], exits
    assert exits[1]["ended_by"] == "the scenario's signal", exits
    r0 = exits[0]
    torn = r0.get("torn_down", False)
    assert (torn and r0["code"] == 15 and r0["ended_by"] ==
            "torchrun closed it after a peer failed") or \
        (r0["class"] == "error" and r0["ended_by"].startswith("its exception (error file)")), r0
    assert first[0]["data"]["rank"] == 1 and first[0]["data"]["how"] == "signal", first
elif scenario == "torchrun-stopped-rank":
    assert "rank 1 sent nothing for 3 s before (frozen) while the others did" in \
        verdict["explanation"], verdict
else:
    sys.exit("unknown scenario " + scenario)
PY
