#!/usr/bin/python3
"""The smallest useful detector in Python (Debian's python3-grpcio and python3-protobuf).

It follows the run's events and reports every rank that fails, with the rank's own error message
as evidence. The harness sets FAULTLINE_CONTROL_ADDR, FAULTLINE_CONTROL_SECRET (every call must
present it as the metadata `faultline-secret`) and FAULTLINE_PYTHON_PROTO (where the build put
faultline_pb2*.py). Run it beside a scenario:

    faultline run scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml \\
        --detector harness/detectors/examples/minimal_detector.py
"""
import json
import os
import sys

sys.path.insert(0, os.environ.get("FAULTLINE_PYTHON_PROTO", "."))

import grpc  # noqa: E402

from harness.proto import faultline_pb2, faultline_pb2_grpc  # noqa: E402


def main() -> int:
    addr = os.environ.get("FAULTLINE_CONTROL_ADDR")
    if not addr:
        print("FAULTLINE_CONTROL_ADDR is not set", file=sys.stderr)
        return 2
    auth = [("faultline-secret", os.environ.get("FAULTLINE_CONTROL_SECRET", ""))]
    stub = faultline_pb2_grpc.ControllerStub(grpc.insecure_channel(addr))
    stream = stub.Observe(faultline_pb2.ObserveRequest(from_start=True), metadata=auth)
    posted = 0
    for event in stream:
        if event.kind == "run_ending":  # the harness is about to stop us
            break
        if event.kind != "error":
            continue
        data = json.loads(event.data_json)
        stub.Report(faultline_pb2.Diagnosis(
            detector="example-py", symptom="unknown", ranks=[event.rank], step=event.step,
            confidence=0.5, evidence=data.get("message", "")), metadata=auth)
        posted += 1
    stream.cancel()
    print(f"example-py: {posted} diagnosis(es) posted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
