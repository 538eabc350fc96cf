#!/usr/bin/env bash
# ctest torch.*: a real PyTorch DDP job (Debian's python3-torch, gloo) under the harness as a
# command workload, reporting through the probe. Runs one scenario of scenarios/torch/ and checks
# the verdict (exit 0) and what the probe delivered into the history: every rank's hello and
# steps, the DDP bucket all-reduces as collective events, setup/step sections; which DDP mode each
# rank took (the comm hook where the scenario's fault point targets the rank's DDP all-reduces,
# else light, whose events are derived and written for the steps that need them) and, when the
# run hung, every rank's DDP all-reduce seq numbers and the one it never finished, and the flight-
# recorder dumps both ranks wrote when the harness declared the hang. Exit 77 (skipped)
# when the python3 has no torch.
#   tests/harness/torch_test.sh FAULTLINE_BIN SOURCE_DIR SCENARIO [--fix] [PYTHON]
set -euo pipefail
. "$(dirname "$0")/torch_lib.sh"
torch_args "$@"
need_torch torch "torch with gloo"
show_ranks() { tail -n 30 "$tmp"/t/ranks/rank*/output.log; }
run_torch_scenario show_ranks
"$py" - "$tmp/t/history.jsonl" "$scenario" "$fix" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
hung = sys.argv[2] == "hung-allreduce" and sys.argv[3] != "--fix"
rank = [e for e in ev if e["source"] == "rank"]
for r in (0, 1):
    mine = [e for e in rank if e["rank"] == r]
    kinds = {e["kind"] for e in mine}
    need = {"hello", "step", "collective", "section", "heartbeat"}
    assert need <= kinds, f"rank {r}: probe events missing: {sorted(need - kinds)}"
    colls = [e["data"] for e in mine if e["kind"] == "collective"]
    assert any(c["op"] == "all_reduce" and c["group"] == "ddp" for c in colls), colls[:3]
    hello = [e["data"] for e in mine if e["kind"] == "hello"][0]
    assert hello["world_size"] == 2 and hello["via"] == "probe", hello
    pm = [e["data"] for e in mine if e["kind"] == "probe_mode"]
    mode = [d["ddp_comm"] for d in pm]
    want = "hook" if hung and r == 1 else "light"  # the fault point is on rank 1's env
    assert mode == [want], f"rank {r}: DDP mode {mode}, expected {want}"
    lazy = want == "light" and pm[0].get("ddp_events") == "lazy"
    assert want == "hook" or lazy, pm  # light mode's default: bucket events when needed
    ddp = [c for c in colls if c["group"] == "ddp"]
    assert all(c.get("derived", False) == (want == "light") for c in ddp), ddp[:3]
    started = [c["seq"] for c in ddp if c["state"] == "started"]
    done = [c["seq"] for c in ddp if c["state"] == "completed"]
    if lazy:  # the first steps (bucket layouts) and a held-up one; seqs count the others
        assert started[:1] == [0] and started == sorted(set(started)), (r, started)
        assert set(done) <= set(started) and done == sorted(done), (r, started, done)
    else:
        assert started == list(range(len(started))) and done == started[:len(done)], \
            (r, started, done)
    if hung:  # rank 1 hangs in its 6th all-reduce (seq 5); rank 0 waits in the same one
        assert started[-1] == 5 and 5 not in done and (lazy or done[-1] == 4), \
            (r, started[-5:], done[-5:])
# The probe's flight recorder: when the harness declared the hang, both ranks dumped (SIGUSR2,
# the watcher thread) in PyTorch's schema, with the same default-group sequence: the first
# gradient all-reduce, DDP's two bucket-order broadcasts (collective_seq_ids 1-2), four more
# all-reduces, then the 6th (DDP seq 5, collective_seq_id 7) started and never completed; a run
# that did not hang has no dumps.
import os, pickle
ranks_dir = os.path.join(os.path.dirname(sys.argv[1]), "ranks")
asked = [e["data"] for e in ev if e["kind"] == "flight_recorder_dump"]
for r in (0, 1):
    dump = os.path.join(ranks_dir, "rank%d" % r, "nccl_trace_rank_%d" % r)
    if not hung:
        assert not os.path.exists(dump), dump
        continue
    with open(dump, "rb") as f:
        t = pickle.load(f)
    assert t["pg_config"]["0"] == {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, t
    got = [(e["profiling_name"], e["collective_seq_id"], e["state"]) for e in t["entries"]]
    want = [("nccl:all_reduce", 0, "completed"), ("nccl:broadcast", 1, "completed"),
            ("nccl:broadcast", 2, "completed")]
    want += [("nccl:all_reduce", s, "completed") for s in range(3, 7)]
    want += [("nccl:all_reduce", 7, "started")]
    assert got == want, (r, got)
assert (asked and asked[0]["dumped"] == [0, 1]) if hung else not asked, asked
rej = [e for e in ev if e["kind"] == "events_rejected"]
assert not rej, rej
print("probe events:", len(rank))
PY
