#!/usr/bin/env python3
"""A small detector on the faultline_client package (python/; docs/detectors.md, "Python").

It follows the run's events and reports
  - every rank that fails, with the rank's own error message as evidence (symptom "unknown");
  - a frozen rank (symptom 4.11): once training has begun, a live rank that has sent nothing for
    STALE_S seconds while its peers still beat. Before it reports, it asks the harness for every
    rank's flight-recorder dump (Control: dump_flight_recorder, as PyTorch's dump-on-signal) and
    adds to the evidence the collective each rank that dumped is waiting in (PyTorch's dump
    schema, ranks/rankN/fr_trace_rank_N.json), and which ranks wrote none.
Install the package, then run it beside a scenario with a python3 that has it:

    python/install.sh .venv      # a venv of /usr/bin/python3; installs from a copy of python/
    faultline run scenarios/symptoms/4.11-frozen-rank.yaml \\
        --detector ".venv/bin/python harness/detectors/examples/minimal_detector.py"
"""
import json
import os
import sys
import time

try:
    import grpc
    from faultline_client import Client, RunView
except ImportError as err:  # grpc, protobuf or the package itself is missing
    sys.exit(f"minimal_detector.py: {err}; install the client: python/install.sh VENV "
             "(docs/detectors.md, \"Python\")")

STALE_S = 3.0


def flight_recorder(client, ranks) -> str:
    """Asks for every rank's dump now; says what each rank's last unfinished collective is."""
    asked = time.time()
    try:
        reply = client.control("dump_flight_recorder", rank=-1)
    except grpc.RpcError as err:  # the diagnosis goes out without them
        return f"; no flight-recorder dumps (Control failed: {err.code()})"
    if not reply.ok:
        return f"; no flight-recorder dumps ({reply.message})"
    run_dir = os.environ.get("FAULTLINE_RUN_DIR", "")
    waiting, none = {}, []
    for r in sorted(ranks):
        path = f"{run_dir}/ranks/rank{r}/fr_trace_rank_{r}.json"
        try:
            if os.path.getmtime(path) < asked - 1:  # an older dump, not this request's
                raise OSError("stale")
            with open(path, encoding="utf-8") as f:
                entries = json.load(f)["entries"]
        except (OSError, ValueError, KeyError):
            none.append(r)
            continue
        open_ops = [e for e in entries if e.get("state") != "completed"]
        if open_ops:
            e = open_ops[-1]
            group = e.get("process_group", ["", ""])[-1]
            waiting[r] = f"{e['profiling_name']} #{e['collective_seq_id']} of group {group}"
    text = "; flight recorder: " + (", ".join(f"rank {r} waits in {w}" for r, w in waiting.items())
                                   or "no rank waits in a collective")
    return text + (f"; no dump from ranks {none}" if none else "")


def main() -> int:
    with Client("example-py") as client:
        view = RunView()
        asked = set()
        for event in client.events(tick=0.2):
            if event is not None:
                view.update(event)
                if event["kind"] == "error" and event["rank"] >= 0:
                    client.report("unknown", [event["rank"]], step=event["step"],
                                  evidence=event["data"].get("message", ""))
                continue
            if view.ending or view.max_step() < 0:
                continue
            now = client.now_ns()
            silent = {r: (now - st["last_beat_ns"]) / 1e9 for r, st in view.ranks.items()
                      if not st["exited"]}
            frozen = sorted(r for r, s in silent.items() if s > STALE_S)
            key = f"frozen|{view.incarnation}|{frozen}"
            if frozen and len(frozen) < len(silent) and key not in asked:
                asked.add(key)  # one dump request per finding
                client.report("4.11", frozen, step=view.max_step(), confidence=0.8, key=key,
                              evidence=f"ranks {frozen} silent for "
                                       f"{max(silent[r] for r in frozen):.1f} s while ranks "
                                       f"{sorted(set(silent) - set(frozen))} still beat"
                                       + flight_recorder(client, silent))
        print(f"example-py: {client.reports} diagnosis(es) posted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
