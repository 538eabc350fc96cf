"""A flight recorder for Python jobs under the probe, dumped in PyTorch's schema.

PyTorch's own Flight Recorder (c10d, 2.x) keeps a ring of the last collectives of every process
group and dumps it on a watchdog timeout or on demand; the Debian torch 1.13 the torch suite runs
has none. This one keeps the same record for the collectives faultline_probe.torch sees (wrapped
torch.distributed calls, DDP's bucket all-reduces in either mode) and writes the files faultline's
C++ workers write, so that a hang of a PyTorch job leaves dumps that PyTorch's analyzer (fr_trace)
and the detectors read like any other:

  ranks/rankN/nccl_trace_rank_N      pickle (protocol 2), as c10d writes it
  ranks/rankN/fr_trace_rank_N.json   the same as JSON

Dumps are written when a recorded collective times out or fails, and on SIGUSR2 -- the harness's
on-demand dump (hang watchdog, Control's dump_flight_recorder), as PyTorch's dump-on-signal --
which install() takes: the process announces it in ranks/rankN/fr_dump_on_signal (its pid). The
signal's byte reaches a watcher thread through signal.set_wakeup_fd, so a rank whose main thread
is blocked in a collective (the GIL released) still dumps at once. Recording costs a list append
per collective; entries become dicts only when dumped. Standard library only.
"""

import collections
import json
import os
import pickle
import threading
import time

VERSION = "2.10"  # the c10d dump schema whose keys these are (as the C++ workers write)
_DTYPES = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "float64": "Double",
           "int32": "Int", "int64": "Long", "uint8": "Byte", "int8": "Char", "bool": "Bool"}
_lock = threading.Lock()
_on = os.environ.get("FAULTLINE_PROBE_FR", "1") != "0"  # FAULTLINE_PROBE_FR=0: no recorder
_dump_lock = threading.Lock()  # one dump at a time (the watcher's, a timeout's, a gloo thread's)
_size_text = os.environ.get("FAULTLINE_PROBE_FR_SIZE", "") or "2000"
if not _size_text.isdigit() or int(_size_text) < 1:
    raise ValueError("FAULTLINE_PROBE_FR_SIZE: '%s' (allowed: a number of records, 1 or more)"
                     % _size_text)
_size = int(_size_text)
# The collectives c10d's recorder keeps with a collective_seq_id. Point-to-point calls (their own
# p2p counter and "send S->D" names) and the object collectives (two collectives each inside
# c10d, which the wrapper does not see) are left out.
RECORDED = frozenset(("all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce",
                      "gather", "scatter", "all_to_all", "barrier"))
_entries = collections.deque(maxlen=_size)
# [record_id, pg, collective_seq_id, op, [(in_numel, out_numel, dtype)...], created_ns,
#  completed_ns, retired, tid]: one collective, or a block of them begun together (DDP's buckets of
# one backward), which takes consecutive record and seq ids and becomes one PyTorch entry per
# collective when dumped (so a dump holds up to FAULTLINE_PROBE_FR_SIZE records, more entries)
_open = {}     # (group, op, seq) -> its entry, until it ends
_groups = {}   # probe group name -> pg: [pg_id, name, desc, ranks, enqueued, completed]
_next = [0]    # the next record_id
_timeout_ms = [60000]
_installed = [False]


def _pg(group):
    """The process group of a probe group name: DDP's buckets go through the default group, as in
    PyTorch, so `ddp` and `world` share one sequence of collective_seq_ids."""
    key = "world" if group in ("world", "ddp") else group
    if key != "world" and "world" not in _groups:
        _pg("world")  # the default group is pg 0, whichever group comes first
    pg = _groups.get(key)
    if pg is None:
        pg_id = len({id(v) for v in _groups.values()})
        # A subgroup's name and desc must agree across ranks (fr_trace asserts it): c10d's group
        # name, given by group_ranks, else the order of first use; desc as c10d's default.
        desc = "default_pg" if key == "world" else "undefined"
        ranks = list(range(int(os.environ.get("WORLD_SIZE", "1") or 1))) if key == "world" else []
        pg = _groups[key] = [pg_id, str(pg_id), desc, ranks, -1, -1]
    if group != key:
        _groups.setdefault(group, pg)
    return pg


def group_ranks(group, ranks, name=None):
    """The global ranks of a probe group (pg_config's `ranks`) and c10d's name for it (the same
    on every rank), once known."""
    with _lock:
        pg = _pg(group)
        if not pg[3]:
            pg[3] = sorted(int(r) for r in ranks)
        if name:
            pg[1] = str(name)


def set_timeout_ms(ms):
    _timeout_ms[0] = int(ms)


def started_block(op, group, sizes):
    """Collectives of one group begun together, `sizes` [(in_numel, out_numel, dtype)] in their
    order (DDP's
    buckets of one backward): one entry for all, the group's next collective_seq_ids. Returns it
    for ended_block (None when the recorder is off). Light mode's per-step cost: one lock, one
    append."""
    if not _on:
        return None
    with _lock:
        pg = _pg(group)
        e = [_next[0], pg, pg[4] + 1, op, sizes, time.time_ns(), None, False,
             threading.get_ident()]
        pg[4] += len(sizes)
        _next[0] += len(sizes)
        _entries.append(e)
    return e


def ended_block(e, completed=True):
    """A block (or one collective) ended: completed, or retired without completing (failed,
    timed out). One assignment, no lock (a dump that reads it half-way sees it still open);
    last_completed_collective is worked out when dumped."""
    if completed:
        e[6] = time.time_ns()
    else:
        e[7] = True


def started(op, group, seq, count, dtype, out_count=None):
    """A collective of this rank began (`seq` the probe's own count of that op in that group;
    `count` its input's elements, `out_count` its output's when they differ). Ops outside
    RECORDED are not kept."""
    if op not in RECORDED:
        return
    e = started_block(op, group, [(int(count), int(count if out_count is None else out_count),
                                   dtype)])
    if e is None:
        return
    with _lock:
        _open[(group, op, seq)] = e


def ended(op, group, seq, completed=True):
    """The collective `started` recorded ended (see ended_block)."""
    with _lock:
        e = _open.pop((group, op, seq), None)
    if e is not None:
        ended_block(e, completed)


def trace():
    """The recorder's content in PyTorch's dump schema (dicts, lists, tuples, str, int, float,
    bool, None: what fr_trace's loader takes from a pickle)."""
    with _lock:
        entries = [list(e) for e in _entries]
        pgs = {id(pg): list(pg) for pg in _groups.values()}
    last_done = {}
    for e in entries:
        if e[6] is not None:
            last_done[id(e[1])] = max(last_done.get(id(e[1]), -1), e[2] + len(e[4]) - 1)
    out = []
    for rid, pg, cseq0, op, sizes, created, done, retired, tid in entries:
        for i, (n_in, n_out, dtype) in enumerate(sizes):
            dt = _DTYPES.get(dtype, "Undefined")
            cseq = cseq0 + i
            out.append({
                "record_id": rid + i, "pg_id": pg[0], "process_group": (pg[1], pg[2]),
                "collective_seq_id": cseq, "p2p_seq_id": 0, "op_id": cseq,
                "profiling_name": "nccl:" + op, "time_created_ns": created,
                "input_sizes": [[n_in]], "input_dtypes": [dt],
                "output_sizes": [[n_out]], "output_dtypes": [dt],
                "state": "completed" if done is not None else "started",
                "time_discovered_started_ns": created,
                "time_discovered_completed_ns": done,
                "duration_ms": None if done is None else (done - created) / 1e6,
                "retired": bool(retired or done is not None), "timeout_ms": _timeout_ms[0],
                "is_p2p": False, "frames": [], "thread_id": str(tid), "thread_name": "",
            })
    config, status = {}, {}
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    for key, pg in pgs.items():
        ranks = pg[3] or list(range(world))
        config[pg[1]] = {"name": pg[1], "desc": pg[2], "ranks": str(ranks)}
        status[str(pg[0])] = {"last_enqueued_collective": pg[4], "last_started_collective": pg[4],
                              "last_completed_collective": last_done.get(key, -1)}
    return {"version": VERSION, "pg_config": config, "pg_status": status, "entries": out}


def _rank_dir():
    import faultline_probe as probe
    p = probe._path()
    return os.path.dirname(p) if p else ""


def _rank():
    return int(os.environ.get("RANK", "0") or 0)


def _write(d, name, data):
    tmp = os.path.join(d, "." + name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(d, name))


def dump(reason):
    """Writes nccl_trace_rank_N (pickle) and fr_trace_rank_N.json into the rank's directory;
    returns False outside the harness or when they cannot be written."""
    d = _rank_dir()
    if not d or not _on:
        return False
    with _dump_lock:
        t = trace()
        r = _rank()
        try:
            # JSON first: the pickle's arrival is what the harness waits for.
            _write(d, "fr_trace_rank_%d.json" % r, json.dumps(t).encode())
            _write(d, "nccl_trace_rank_%d" % r, pickle.dumps(t, protocol=2))
        except OSError:
            return False
    return True


def _forked():
    """A forked child (a data loader's worker) is not the rank: no recorder, no signal, nothing
    its parent held."""
    global _lock, _dump_lock, _on
    import signal
    _lock, _dump_lock, _on = threading.Lock(), threading.Lock(), False
    _entries.clear()
    _open.clear()
    _installed[0] = False
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    except (ValueError, OSError):
        pass


def _watch(fd):
    import signal
    while True:
        try:
            got = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not got:
            return
        if signal.SIGUSR2 in got:
            try:
                dump("on demand (SIGUSR2)")
            except Exception:  # noqa: BLE001 - the next request gets another try
                pass


def install():
    """Takes SIGUSR2 for on-demand dumps and announces it (fr_dump_on_signal), under the harness
    only and when the job has no SIGUSR2 handler of its own. From the main thread; True when
    installed (the dumps are then written by a watcher thread, whatever the main thread does)."""
    import signal
    if _installed[0]:
        return True
    d = _rank_dir()
    if not d or not _on or not os.environ.get("FAULTLINE_RUN_ID"):
        return False
    r = w = -1
    try:
        if signal.getsignal(signal.SIGUSR2) != signal.SIG_DFL:  # the job's (or a native) handler
            return False
        r, w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(w, False)
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        if old != -1:  # the job's own wakeup fd (asyncio): leave it theirs
            signal.set_wakeup_fd(old)
            raise ValueError("wakeup fd taken")
        signal.signal(signal.SIGUSR2, lambda *_: None)  # the byte on the pipe does the work
        signal.siginterrupt(signal.SIGUSR2, False)  # SA_RESTART for what restarts (read, write)
    except (ValueError, OSError, RuntimeError):  # not the main thread, no pipe, fd taken
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
        return False
    threading.Thread(target=_watch, args=(r,), daemon=True,
                     name="faultline-probe-flight-recorder").start()
    _installed[0] = True
    os.register_at_fork(after_in_child=_forked)
    try:
        _write(d, "fr_dump_on_signal", b"%d\n" % os.getpid())
    except OSError:
        pass
    return True
