"""A small client for faultline's control plane, mirroring the C++ one (harness/detectors/client.hpp).

A detector or recovery tool follows a run's merged event stream (Observe, replayed from the start,
without ground truth), posts diagnoses (Report) and acts on the run (Control). Every call presents
the run's secret as the gRPC metadata ``faultline-secret``.
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set

try:  # Python 3.8+
    from typing import TypedDict
except ImportError:  # pragma: no cover
    TypedDict = dict  # type: ignore

import grpc

from faultline_client import faultline_pb2 as pb
from faultline_client import faultline_pb2_grpc as pb_grpc

#: The gRPC metadata key that carries the run's secret (base/control_auth.hpp).
SECRET_HEADER = "faultline-secret"
#: The gRPC metadata key that carries the harness's name for the tool (FAULTLINE_TOOL_NAME).
TOOL_HEADER = "faultline-tool"
#: The environment variables the harness sets for the tools it starts.
ADDR_ENV = "FAULTLINE_CONTROL_ADDR"
SECRET_ENV = "FAULTLINE_CONTROL_SECRET"
NAME_ENV = "FAULTLINE_TOOL_NAME"

Event = Dict[str, Any]


def stage_of(symptom: str) -> int:
    """The taxonomy stage a symptom id belongs to ("4.11" -> 4; "unknown" -> 0)."""
    head = symptom.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def secret_for(addr: str) -> str:
    """The secret to present to ``addr``: FAULTLINE_CONTROL_SECRET when set, else, for a unix
    socket address (``unix:RUN_DIR/control.sock``), RUN_DIR/control.secret when readable, else ""."""
    secret = os.environ.get(SECRET_ENV)
    if secret is not None:
        return secret
    if addr.startswith("unix:"):
        path = os.path.join(os.path.dirname(addr[len("unix:"):]), "control.secret")
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return ""
    return ""


def event_to_dict(e: pb.Event) -> Event:
    """An Event message as a dict with the same keys as the C++ client's Event: rank, source,
    kind, step, t_ns (harness time, ns since the run started), data (the parsed data_json),
    plus seq and time_unix_ns."""
    try:
        data = json.loads(e.data_json) if e.data_json else {}
    except ValueError:
        data = {"raw": e.data_json}
    return {"rank": e.rank, "source": e.source, "kind": e.kind, "step": e.step,
            "t_ns": e.harness_ns, "data": data, "seq": e.seq, "time_unix_ns": e.time_unix_ns}



def clock_rate() -> float:
    """Harness seconds per second here: 1 beside a live run, the replay's speed when
    ``faultline score --offline`` feeds a recorded history faster (FAULTLINE_CLOCK_RATE)."""
    try:
        rate = float(os.environ.get("FAULTLINE_CLOCK_RATE", "1"))
    except ValueError:
        return 1.0
    return rate if rate > 0 else 1.0

class Client:
    """One tool's connection to a run's control plane.

    ``addr`` defaults to FAULTLINE_CONTROL_ADDR and ``secret`` to :func:`secret_for`; the name
    posted with diagnoses is ``name``, else FAULTLINE_TOOL_NAME, else "python". Raises
    RuntimeError without an address.
    """

    def __init__(self, name: Optional[str] = None, addr: Optional[str] = None,
                 secret: Optional[str] = None) -> None:
        addr = addr or os.environ.get(ADDR_ENV, "")
        if not addr:
            raise RuntimeError(f"no control-plane address: pass addr or set {ADDR_ENV} "
                               "(the harness sets it for the tools it starts)")
        self.addr: str = addr
        self.name: str = name or os.environ.get(NAME_ENV) or "python"
        self._metadata = [(SECRET_HEADER, secret if secret is not None else secret_for(addr))]
        # The name the harness gave this tool, so the run's summary credits its diagnoses to it
        # whatever ``name`` they are posted under.
        if os.environ.get(NAME_ENV):
            self._metadata.append((TOOL_HEADER, os.environ[NAME_ENV]))
        self._channel = grpc.insecure_channel(addr)
        self._stub = pb_grpc.ControllerStub(self._channel)
        self._posted: Set[str] = set()
        self.reports: int = 0
        self._last_event_ns = 0
        self._last_event_at = time.monotonic()

    def close(self) -> None:
        """Closes the channel (also on leaving a ``with`` block)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now_ns(self) -> int:
        """Estimated current harness time: the last event's time plus the time since it came."""
        return self._last_event_ns + int(
            (time.monotonic() - self._last_event_at) * 1e9 * clock_rate())

    def events(self, kinds: Sequence[str] = (), tick: Optional[float] = None,
               stop_at_run_ending: bool = True) -> Iterator[Optional[Event]]:
        """Follows the run from its start: yields every event as a dict (see
        :func:`event_to_dict`) in history order, until ``run_ending`` (yielded last) or the end of
        the stream. With ``tick`` (seconds), also yields None whenever no event came for that
        long, so a detector can judge silence (use :meth:`now_ns` for the time)."""
        request = pb.ObserveRequest(kinds=list(kinds), from_start=True)
        stream = self._stub.Observe(request, metadata=self._metadata)
        if tick is None:
            try:
                for message in stream:
                    event = self._seen(message)
                    yield event
                    if stop_at_run_ending and event["kind"] == "run_ending":
                        return
            finally:
                stream.cancel()
            return
        inbox: "queue.Queue[Any]" = queue.Queue()
        end = object()

        def pump() -> None:
            try:
                for message in stream:
                    inbox.put(message)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.CANCELLED:
                    inbox.put(err)
            inbox.put(end)

        reader = threading.Thread(target=pump, name="faultline-observe", daemon=True)
        reader.start()
        try:
            while True:
                try:
                    item = inbox.get(timeout=tick / clock_rate())
                except queue.Empty:
                    yield None
                    continue
                if item is end:
                    return
                if isinstance(item, grpc.RpcError):
                    raise item
                event = self._seen(item)
                yield event
                if stop_at_run_ending and event["kind"] == "run_ending":
                    return
        finally:
            stream.cancel()

    def _seen(self, message: pb.Event) -> Event:
        event = event_to_dict(message)
        self._last_event_ns = max(self._last_event_ns, event["t_ns"])
        self._last_event_at = time.monotonic()
        return event

    def report(self, symptom: str, ranks: Sequence[int], confidence: float = 0.5,
               evidence: str = "", step: int = -1, stage: int = 0,
               key: Optional[str] = None) -> Optional[int]:
        """Posts a diagnosis once per ``key`` (default: symptom + ranks). ``symptom`` is a
        taxonomy id ("4.11") or "unknown"; ``stage`` 0 means the symptom's own. Returns the
        diagnosis's position in the run history, or None for a repeat; raises grpc.RpcError when
        the harness refuses it."""
        key = key if key is not None else f"{symptom}|{','.join(map(str, sorted(ranks)))}"
        if key in self._posted:
            return None
        diagnosis = pb.Diagnosis(detector=self.name, symptom=symptom, ranks=list(ranks),
                                 step=step, confidence=confidence, evidence=evidence,
                                 stage=stage or stage_of(symptom))
        ack = self._stub.Report(diagnosis, metadata=self._metadata)
        self._posted.add(key)
        self.reports += 1
        return int(ack.seq)

    def control(self, action: str, rank: int = -1, signal: int = 0, plan: str = "",
                checkpoint: str = "", args: Sequence[str] = (), dp: int = 0) -> pb.ControlReply:
        """One Control action (kill_rank, restart_rank, restart_job, abort, list_faults,
        arm_faults, clear_faults, dump_flight_recorder; docs/detectors.md). Returns the reply (``ok``, ``message``,
        ``faults``); raises grpc.RpcError when the call itself fails."""
        request = pb.ControlRequest(action=action, rank=rank, signal=signal, plan=plan,
                                    checkpoint=checkpoint, requester=self.name, args=list(args),
                                    dp=dp)
        return self._stub.Control(request, metadata=self._metadata)


class RankState(TypedDict):
    """One rank as a :class:`RunView` knows it. Times are harness time (ns since the run started,
    the events' ``t_ns``); -1 until the first such event."""

    exited: bool        #: its ``rank_exit`` came (reset by its next ``launch``)
    exit_class: str     #: how it ended: ok, error, crash or signal ("" while it runs)
    last_beat_ns: int   #: its last event of any kind (heartbeats come every second)
    last_step: int      #: the highest step it reported
    last_step_ns: int   #: when it reported that step


class RunView:
    """What a monitor can know about a run from its stream (the C++ RunView): the world size,
    each rank's liveness, progress and exits. Feed it every event with :meth:`update`.

    Attributes: ``world`` (int, from ``run_start``; 0 before it), ``ranks`` (dict rank ->
    :class:`RankState`, a rank appears with its first event or launch), ``incarnation`` (int,
    restarts so far; ``ranks`` is emptied at each), ``ending`` (bool, ``run_ending`` seen)."""

    def __init__(self) -> None:
        self.world: int = 0
        self.ranks: Dict[int, RankState] = {}
        self.incarnation: int = 0
        self.ending: bool = False

    def _rank(self, r: int) -> RankState:
        return self.ranks.setdefault(r, RankState(exited=False, exit_class="", last_beat_ns=-1,
                                                  last_step=-1, last_step_ns=-1))

    def update(self, e: Event) -> None:
        """Takes one event (a dict from :meth:`Client.events`) into the view."""
        kind, data = e["kind"], e["data"]
        if e["source"] == "harness":
            if kind == "run_start":
                self.world = int(data.get("ranks", 0))
            elif kind == "launch" and e["rank"] >= 0:
                r = self._rank(e["rank"])
                r.update(exited=False, exit_class="", last_beat_ns=e["t_ns"])
            elif kind == "rank_exit" and e["rank"] >= 0:
                self._rank(e["rank"]).update(exited=True, exit_class=data.get("class", ""))
            elif kind == "restart":
                self.incarnation += 1
                self.ranks.clear()
            elif kind == "run_ending":
                self.ending = True
            return
        if e["source"] != "rank" or e["rank"] < 0:
            return
        r = self._rank(e["rank"])
        r["last_beat_ns"] = e["t_ns"]
        if kind == "step" and e["step"] > r["last_step"]:
            r["last_step"], r["last_step_ns"] = e["step"], e["t_ns"]

    def alive(self) -> List[int]:
        """The ranks that have not exited."""
        return sorted(r for r, st in self.ranks.items() if not st["exited"])

    def max_step(self) -> int:
        """The highest step any rank reached (-1 before the first)."""
        return max((st["last_step"] for st in self.ranks.values()), default=-1)
