"""faultline probe for Python jobs: events to the harness with no gRPC inside the job.

The harness gives each rank FAULTLINE_PROBE_FILE (ranks/rankN/probe.jsonl of the run), or, when
one launcher process starts every rank (torchrun), FAULTLINE_PROBE_DIR and the rank's RANK. Each
event is one JSON line appended with one write(2) on an O_APPEND descriptor -- the format of the C
library (workloads/probe/probe.h) -- which the harness reads as the file grows and puts into the
run's history as an event of that rank (docs/harness.md lists the kinds). The events a step
repeats (its section, collective starts and completions) wait in memory and go out with the step
event: they are written together, with one write(2), once the oldest has waited
FAULTLINE_PROBE_FLUSH_MS (default 100, the period at which the harness reads the files) -- by the next
event or by the heartbeat thread --, and so is everything at every other event, probe.flush() and a normal exit (a job that ends
with os._exit calls probe.flush() first). Outside the harness every call does nothing.

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

__all__ = [
    "init", "enabled", "event", "step", "heartbeat", "section", "collective", "error",
    "add_comm_time", "flush", "close",
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
# Callables the heartbeat thread runs at every tick (light DDP mode: publishing the buckets of a
# backward that takes long).
_idle_hooks = []
_pending = []     # events not written yet: (time_unix_ns, kind, step, text, args); see _put
_pending_t = 0.0  # time.monotonic() of the oldest of them


def _env_ms(name, default):
    try:
        v = float(os.environ.get(name, "") or default)
    except ValueError:
        raise ValueError("%s: '%s' is not a number of milliseconds" % (name, os.environ[name]))
    if not v > 0 or not math.isfinite(v):
        raise ValueError("%s: '%s' (allowed: more than 0)" % (name, os.environ[name]))
    return v


_FLUSH_S = _env_ms("FAULTLINE_PROBE_FLUSH_MS", 100) / 1000.0


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
        if _fd >= 0:
            import atexit
            atexit.register(flush)  # what still waits in memory (see _put)
            os.register_at_fork(after_in_child=_forked)
    return _fd


def _forked():
    """A forked child (a data loader's worker) writes its own events only: what its parent had
    waiting stays the parent's, and a lock another thread held at the fork is not held here."""
    global _lock
    _lock = threading.Lock()
    _pending.clear()


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


_HEAD = '{"seq":%d,"time_unix_ns":%d,"kind":%s,"step":%d,"data":'


def _write(fd):
    """Puts the waiting events' lines together and writes them with one write(2); the caller
    holds _lock. A short write (a full disk) goes on from where it stopped."""
    global _seq
    seq, parts = _seq, []
    for t_ns, kind, step, text, args in _pending:
        parts.append(_HEAD % (seq, t_ns, kind, step))
        parts.append(text if args is None else text % args)
        parts.append("}\n")
        seq += 1
    _seq = seq
    _pending.clear()
    data = "".join(parts).encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


def _put(kind, step, text, args=None, hot=False, t_ns=None):
    """Appends one event: `kind` as JSON text, its data the JSON object text `text` (or
    `text % args`, formatted when written). A `hot` event (the ones a step repeats: its section,
    the step, collective starts and completions) waits in memory until the oldest waiting event
    is FAULTLINE_PROBE_FLUSH_MS (default 100) old: the next event then writes them all with one
    write(2), or the heartbeat thread does if none comes. Any other event is written at once,
    after what waits. Lines and their seq numbers keep the order of the calls."""
    global _pending_t
    with _lock:
        fd = _fd if _fd is not None else _open()
        if fd < 0:
            return False
        now = time.monotonic()
        if not _pending:
            _pending_t = now
        _pending.append((time.time_ns() if t_ns is None else t_ns, kind, step, text, args))
        if hot and now - _pending_t < _FLUSH_S:
            return True
        return _write(fd)


def _emit(kind, data_text, step=-1, hot=False, t_ns=None):
    """Appends one event of `kind` whose data is the JSON object text `data_text` (see _put)."""
    return _put(_q(kind), step, data_text, None, hot, t_ns)


def flush():
    """Writes the events still waiting in memory (done by every non-hot event, the heartbeat
    thread, and at exit; a job that leaves with os._exit calls it first)."""
    with _lock:
        if _pending and _fd is not None and _fd >= 0:
            _write(_fd)


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
        # Where torchelastic's @record writes this rank's error (torchrun's agent sets it per
        # worker): the harness reads it after the job to name the failing rank's exception.
        "error_file": os.environ.get("TORCHELASTIC_ERROR_FILE", ""),
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
    # One at once, so a job shorter than the interval still shows its monitor is alive. Between
    # heartbeats the thread wakes every FAULTLINE_PROBE_FLUSH_MS: it runs the idle hooks and
    # writes the events that waited that long (a job stuck in a collective, its GIL released).
    heartbeat()
    next_beat = time.monotonic() + interval_s
    tick = min(interval_s, _FLUSH_S)
    while not _beat_stop.wait(tick):
        for h in _idle_hooks:
            try:
                h()
            except Exception:  # noqa: BLE001 - the heartbeats go on
                pass
        now = time.monotonic()
        if now >= next_beat:
            heartbeat()  # writes what waits, too
            next_beat = now + interval_s
        elif _pending and now - _pending_t >= _FLUSH_S:
            flush()


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
        return _emit("step", json.dumps(data, separators=(",", ":"), allow_nan=False), int(n),
                     hot=True)
    return _put('"step"', int(n), '{"loss":%s,"step_time_s":%r,"interval_s":%r,"comm_s":%r}',
                ("null" if loss is None else repr(loss), st, float(interval), float(comm)), True)


class _Section:
    """with section(name): its begin and end events (a class: cheaper than a generator)."""

    __slots__ = ("name", "q", "hot")

    def __init__(self, name):
        self.name, self.q = name, _q(name)
        self.hot = name == "step"  # once a step: written with the step's other events

    def __enter__(self):
        if _fd != -1:
            _put('"section"', -1, '{"name":%s,"state":"begin"}', (self.q,), self.hot)
        return self

    def __exit__(self, *exc):
        if _fd != -1:  # off: nothing to time either
            _put('"section"', -1, '{"name":%s,"state":"end"}', (self.q,), self.hot)
            if self.name == "setup":  # the first step's interval starts when setup ends
                global _last_step_end
                _last_step_end = time.monotonic()
        return False


def section(name):
    """A section of the job (NVRx's names: setup, step, checkpoint, eval), as `with`."""
    return _Section(name)


def collective(op, state, group="world", seq=0, count=0, dtype="", **extra):
    if _fd == -1:
        return False
    if extra:
        data = {"op": op, "state": state, "group": group, "seq": int(seq), "count": int(count)}
        if dtype:
            data["dtype"] = dtype
        data.update(extra)
        return event("collective", data)
    return _put('"collective"', -1, '{"op":%s,"state":%s,"group":%s,"seq":%d,"count":%d%s}',
                (_q(op), _q(state), _q(group), int(seq), int(count),
                 ',"dtype":' + _q(dtype) if dtype else ""), True)


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
    flush()
    with _lock:
        if _fd is not None and _fd >= 0:
            os.close(_fd)
        _fd = None
