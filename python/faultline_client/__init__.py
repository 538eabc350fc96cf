"""Python client for faultline's control plane (harness/proto/faultline.proto).

    from faultline_client import Client
    with Client("my-detector") as c:
        for event in c.events():
            ...
            c.report("4.11", [2], confidence=0.8, evidence="...")

The generated classes are ``faultline_client.faultline_pb2`` (messages) and
``faultline_client.faultline_pb2_grpc`` (the Controller stub).
"""
from faultline_client.client import (ADDR_ENV, NAME_ENV, SECRET_ENV, SECRET_HEADER, TOOL_HEADER,
                                     Client, Event, RankState, RunView, event_to_dict, secret_for,
                                     stage_of)

__all__ = ["ADDR_ENV", "NAME_ENV", "SECRET_ENV", "SECRET_HEADER", "TOOL_HEADER", "Client", "Event",
           "RankState", "RunView", "event_to_dict", "secret_for", "stage_of"]
__version__ = "0.1.0"
