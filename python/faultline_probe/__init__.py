"""faultline probe for Python jobs: events to the harness with no gRPC inside the job.

The harness gives each rank FAULTLINE_PROBE_FILE (ranks/rankN/probe.jsonl of the run), or, when
one launcher process starts every rank (torchrun), FAULTLINE_PROBE_DIR and the rank's RANK. Each
event is one JSON line appended with one write(2) on an O_APPEND descriptor -- the format of the C
library (workloads/probe/probe.h) -- which the harness reads as the file grows and puts into the
run's history as an event of that rank (docs/harness.md lists the kinds). Outside the harness
every call does nothing.

    import faultline_probe as probe
    probe.init()                      # hello + a heartbeat thread
    with probe.section("setup"): ...  # NVRx's section names: setup, step, checkpoint, eval
    probe.step(i, loss=loss.item())   # interval and time in collectives filled in
    probe.error("comm", str(e))

For torch.distributed, faultline_probe.torch wraps the collectives (events and fault points).
"""

import json
import math
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager

__all__ = [
    "init", "enabled", "event", "step", "heartbeat", "section", "collective", "error",
    "add_comm_time", "close",
]

_lock = threading.Lock()
_fd = None  # None: not opened yet; -1: probe off
_seq = 0
_last_step_end = None
_comm_s = 0.0  # seconds inside collectives since the last step event
_beat = None
_beat_stop = threading.Event()
# Callables the torch module adds: run at every step() before its event (derived collectives
# complete at the step boundary), and with the exception when the job dies of one.
_step_hooks = []
_fatal_hooks = []


def _path():
    p = os.environ.get("FAULTLINE_PROBE_FILE")
    if p:
        return p
    d, r = os.environ.get("FAULTLINE_PROBE_DIR"), os.environ.get("RANK")
    if d and r is not None and r.isdigit():
        return os.path.join(d, "rank" + r, "probe.jsonl")
    return None


def _open():
    global _fd
    if _fd is None:
        p = _path()
        try:
            _fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600) if p else -1
        except OSError:
            _fd = -1
    return _fd


def enabled():
    """True when the job runs under the harness (a probe file to write)."""
    with _lock:
        return _open() >= 0


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


_quoted = {}  # JSON text of the few strings the hot events repeat (ops, states, groups)


def _q(text):
    out = _quoted.get(text)
    if out is None:
        out = json.dumps(str(text))
        if len(_quoted) < 4096:
            _quoted[text] = out
    return out


def _emit(kind, data_text, step=-1):
    """Appends one event whose data is the JSON object text `data_text`: the line is put
    together by formatting, and one write(2) appends it."""
    global _seq
    with _lock:
        fd = _open()
        if fd < 0:
            return False
        line = '{"seq":%d,"time_unix_ns":%d,"kind":%s,"step":%d,"data":%s}\n' % (
            _seq, time.time_ns(), _q(kind), step, data_text)
        _seq += 1
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        except OSError:
            return False
        return True


def event(kind, data=None, step=-1):
    """Appends one event of `kind` (a word of a-z, 0-9, _) with `data` (a dict)."""
    if _fd == -1:
        return False
    return _emit(kind, json.dumps(data or {}, separators=(",", ":"), allow_nan=False), int(step))


def init(backend="gloo", heartbeat_ms=None):
    """Says hello (pid, world size, local rank, host) and starts a heartbeat thread."""
    global _last_step_end, _beat
    _last_step_end = time.monotonic()
    ok = event("hello", {
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "pid": os.getpid(), "host": socket.gethostname(), "backend": backend,
        "run_id": os.environ.get("FAULTLINE_RUN_ID", ""), "via": "probe",
    })
    if ok and _beat is None:
        ms = heartbeat_ms or int(os.environ.get("FAULTLINE_HEARTBEAT_MS", "1000") or 1000)
        _beat = threading.Thread(target=_heartbeats, args=(ms / 1000.0,), daemon=True,
                                 name="faultline-probe-heartbeat")
        _beat.start()
    if ok:
        _install_excepthook()
        _install_stack_dump()
    return ok


_stacks_file = None


def _install_stack_dump():
    """Python stacks of every thread on SIGUSR1, into stacks.txt beside the probe's file.

    Announced in stacks_on_signal (the pid) so that the harness, when it declares a hang or its
    run timeout, knows it may send the signal (a process without the handler would die of it).
    Left out when the job has a SIGUSR1 handler of its own or FAULTLINE_PROBE_STACKS=0."""
    global _stacks_file
    if _stacks_file is not None or os.environ.get("FAULTLINE_PROBE_STACKS", "1") == "0":
        return
    import faulthandler
    import signal
    try:
        if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
            return
    except ValueError:
        return
    d = os.path.dirname(_path() or "")
    if not d:
        return
    try:
        _stacks_file = open(os.path.join(d, "stacks.txt"), "a")
        faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True, chain=False)
        tmp = os.path.join(d, "stacks_on_signal.tmp")
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.replace(tmp, os.path.join(d, "stacks_on_signal"))
    except (OSError, RuntimeError, ValueError):
        pass


def _heartbeats(interval_s):
    # One at once, so a job shorter than the interval still shows its monitor is alive.
    heartbeat()
    while not _beat_stop.wait(interval_s):
        heartbeat()


def heartbeat():
    return event("heartbeat")


def add_comm_time(seconds):
    """Counts `seconds` spent in a collective towards the next step's comm_s."""
    global _comm_s
    with _lock:
        _comm_s += seconds


def step(n, loss=None, step_time_s=None, **extra):
    """Step `n` (0-based) ended: interval since the previous one, time in collectives."""
    global _last_step_end, _comm_s
    for h in _step_hooks:
        h()
    now = time.monotonic()
    with _lock:
        interval = now - _last_step_end if _last_step_end is not None else 0.0
        _last_step_end = now
        comm, _comm_s = _comm_s, 0.0
    if _fd == -1:
        return False
    loss = _finite(None if loss is None else float(loss))
    st = float(step_time_s if step_time_s is not None else interval)
    if extra or not (math.isfinite(st) and math.isfinite(interval) and math.isfinite(comm)):
        data = {"loss": loss, "step_time_s": st, "interval_s": float(interval),
                "comm_s": float(comm)}
        data.update(extra)
        return event("step", data, step=n)
    return _emit("step", '{"loss":%s,"step_time_s":%r,"interval_s":%r,"comm_s":%r}' % (
        "null" if loss is None else repr(loss), st, float(interval), float(comm)), int(n))


@contextmanager
def section(name):
    """A section of the job (NVRx's names: setup, step, checkpoint, eval)."""
    if _fd == -1:  # off: nothing to time either
        yield
        return
    q = _q(name)
    _emit("section", '{"name":%s,"state":"begin"}' % q)
    try:
        yield
    finally:
        _emit("section", '{"name":%s,"state":"end"}' % q)
        if name == "setup":  # the first step's interval starts when setup ends
            global _last_step_end
            _last_step_end = time.monotonic()


def collective(op, state, group="world", seq=0, count=0, dtype="", **extra):
    if _fd == -1:
        return False
    if extra:
        data = {"op": op, "state": state, "group": group, "seq": int(seq), "count": int(count)}
        if dtype:
            data["dtype"] = dtype
        data.update(extra)
        return event("collective", data)
    return _emit("collective", '{"op":%s,"state":%s,"group":%s,"seq":%d,"count":%d%s}' % (
        _q(op), _q(state), _q(group), int(seq), int(count),
        ',"dtype":' + _q(dtype) if dtype else ""))


def error(klass, message, exit_code=None):
    data = {"class": klass, "message": str(message)[:4000]}
    if exit_code is not None:
        data["exit_code"] = int(exit_code)
    return event("error", data)


def classify(exc):
    """The harness's error class for an exception a job raised."""
    text = "%s: %s" % (type(exc).__name__, exc)
    low = text.lower()
    if isinstance(exc, MemoryError) or "out of memory" in low:
        return "oom"
    if ("address already in use" in low or "diststoreerror" in low or "store based barrier" in low
            or "rendezvous" in low):
        return "rendezvous"
    if "timed out" in low or "timeout" in low:
        return "comm timeout"  # the class faultline's workers give a collective's timeout
    if "connection closed" in low or "connection reset" in low or "gloo" in low or "nccl" in low:
        return "comm"
    return "error"


_hooked = False


def _install_excepthook():
    global _hooked
    if _hooked:
        return
    _hooked = True
    previous = sys.excepthook

    def hook(tp, value, tb):
        try:
            for h in _fatal_hooks:
                try:
                    h(value)
                except Exception:  # noqa: BLE001 - the error event goes out regardless
                    pass
            error(classify(value), "%s: %s" % (tp.__name__, value), 1)
        finally:
            previous(tp, value, tb)

    sys.excepthook = hook


def close():
    global _fd, _beat
    _beat_stop.set()
    if _beat is not None:
        _beat.join(timeout=2)
        _beat = None
    with _lock:
        if _fd is not None and _fd >= 0:
            os.close(_fd)
        _fd = None
