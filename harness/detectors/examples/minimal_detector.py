#!/usr/bin/env python3
"""A small detector on the faultline_client package (python/; docs/detectors.md, "Python").

It follows the run's events and reports
  - every rank that fails, with the rank's own error message as evidence (symptom "unknown");
  - a frozen rank (symptom 4.11): once training has begun, a live rank that has sent nothing for
    STALE_S seconds while its peers still beat.
Install the package, then run it beside a scenario with a python3 that has it:

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-deps --no-build-isolation ./python
    faultline run scenarios/symptoms/4.11-frozen-rank.yaml \\
        --detector ".venv/bin/python harness/detectors/examples/minimal_detector.py"
"""
import sys

try:
    from faultline_client import Client, RunView
except ImportError as err:  # grpc, protobuf or the package itself is missing
    sys.exit(f"minimal_detector.py: {err}; install the client: pip install ./python "
             "(docs/detectors.md, \"Python\")")

STALE_S = 3.0


def main() -> int:
    with Client("example-py") as client:
        view = RunView()
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
            if frozen and len(frozen) < len(silent):
                client.report("4.11", frozen, step=view.max_step(), confidence=0.8,
                              key=f"frozen|{view.incarnation}|{frozen}",
                              evidence=f"ranks {frozen} silent for "
                                       f"{max(silent[r] for r in frozen):.1f} s while ranks "
                                       f"{sorted(set(silent) - set(frozen))} still beat")
        print(f"example-py: {client.reports} diagnosis(es) posted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
