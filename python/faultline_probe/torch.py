"""torch.distributed under the faultline probe: collective events and collective fault points.

    import faultline_probe as probe, faultline_probe.torch as fpt
    probe.init()
    fpt.wrap()                                        # dist.all_reduce & co. report and obey faults
    fpt.attach(ddp_model)     # DDP's gradient buckets: DDP's own C++ all-reduce with events
                              # derived on the main thread (written when a step needs them),
                              # or allreduce_hook when a fault point targets them (see attach)

Every wrapped call emits `collective` events (started, then completed / timed-out / failed; with
op, group, seq, count, dtype) and adds its time to the next step's comm_s. A call that raises is
reported with the error's class before the exception goes on.

Fault points come from FAULTLINE_PROBE_FAULTS (a scenario's env or rank_env), items separated by
';':  OP[rank=R,seq=N,group=G]=ACTION  with OP a collective (all_reduce, broadcast, all_gather,
reduce_scatter, barrier, ...; `any` for every one), every condition optional (seq counts the
rank's calls of that op in that group from 0), and ACTION one of
  hang        the rank never returns from the call (its peers wait in theirs)
  drop        the rank skips the call and goes on (its peers wait for it)
  delay(S)    the rank sleeps S seconds before the call
e.g.  all_reduce[rank=1,seq=5,group=ddp]=hang.  A malformed item stops the job at wrap() with a
message naming it.
"""

import os
import re
import threading
import time

import torch
import torch.distributed as dist

import faultline_probe as probe
from faultline_probe import flight

_OPS = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter",
        "all_to_all", "barrier", "send", "recv", "all_gather_object", "broadcast_object_list"]
_ITEM = re.compile(r"^([a-z_]+)(?:\[([^\]]*)\])?=(hang|drop|delay\(([0-9.]+)\))$")
_faults = []
_seq = {}
_originals = {}


def parse_faults(text):
    out = []
    for item in [x.strip() for x in (text or "").split(";") if x.strip()]:
        m = _ITEM.match(item)
        if not m or (m.group(1) not in _OPS and m.group(1) != "any"):
            raise ValueError(
                "FAULTLINE_PROBE_FAULTS: '%s' is not OP[rank=R,seq=N,group=G]=hang|drop|delay(S) "
                "(OP: any, %s)" % (item, ", ".join(_OPS)))
        cond = {}
        for kv in [x.strip() for x in (m.group(2) or "").split(",") if x.strip()]:
            k, _, v = kv.partition("=")
            if k not in ("rank", "seq", "group") or not v or (k != "group" and not v.isdigit()):
                raise ValueError("FAULTLINE_PROBE_FAULTS: '%s': condition '%s' (allowed: rank=N, "
                                 "seq=N, group=NAME)" % (item, kv))
            cond[k] = v if k == "group" else int(v)
        action = m.group(3) if not m.group(4) else "delay"
        out.append({"op": m.group(1), "cond": cond, "action": action,
                    "delay": float(m.group(4) or 0), "text": item})
    return out


def _rank():
    try:
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    except Exception:  # noqa: BLE001 - a job that never joined
        return int(os.environ.get("RANK", "0"))


def _fault_for(op, group, seq):
    if not _faults:
        return None
    for f in _faults:
        c = f["cond"]
        if f["op"] not in (op, "any"):
            continue
        if "rank" in c and c["rank"] != _rank():
            continue
        if "seq" in c and c["seq"] != seq:
            continue
        if "group" in c and c["group"] != group:
            continue
        return f
    return None


_dtype_names = {}


def _dtype(t):
    name = _dtype_names.get(t.dtype)
    if name is None:
        name = _dtype_names[t.dtype] = str(t.dtype).replace("torch.", "")
    return name


def _numel(x):
    """Elements of a tensor or of a list of tensors (0 for anything else)."""
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(t.numel() for t in x if isinstance(t, torch.Tensor))
    return 0


def _size(args):
    t = args[0] if args else None
    if isinstance(t, torch.Tensor):
        return t.numel(), _dtype(t)
    if isinstance(t, (list, tuple)) and t and isinstance(t[0], torch.Tensor):
        return _numel(t), _dtype(t[0])
    return 0, ""


class _Done:
    """What a dropped async collective returns: already complete."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


def _fr_io(op, args, count):
    """Elements in and out of a collective, as c10d's recorder sizes them (in place: the same)."""
    n = _numel
    a = list(args) + [None, None]
    if op == "all_gather":          # (output list, input)
        return n(a[1]), n(a[0])
    if op in ("reduce_scatter", "all_to_all"):  # (output, input list)
        return n(a[1]), n(a[0])
    if op == "gather":              # (input, gather list on the destination)
        return n(a[0]), n(a[1]) or n(a[0])
    if op == "scatter":             # (output, scatter list on the source)
        return n(a[1]) or n(a[0]), n(a[0])
    return count, count


def _begin(op, group_name, count, dtype, io=None):
    """Counts the call, acts on a fault point, reports it started. Returns (seq, dropped).
    `io`: (elements in, elements out) for the flight recorder when they differ from `count`."""
    key = (op, group_name)
    seq = _seq.get(key, 0)
    _seq[key] = seq + 1
    fault = _fault_for(op, group_name, seq)
    if fault is not None:
        probe.event("fault_fired", {"site": "torch." + op, "seq": seq, "action": fault["action"],
                                    "plan": fault["text"]})
        if fault["action"] == "delay":
            time.sleep(fault["delay"])
        elif fault["action"] == "drop":
            return seq, True
    probe.collective(op, "started", group_name, seq, count, dtype)
    n_in, n_out = io if io is not None else (count, count)
    flight.started(op, group_name, seq, n_in, dtype, n_out)
    if fault is not None and fault["action"] == "hang":
        probe.flush()
        while True:  # the process lives on, its peers wait for it
            time.sleep(3600)
    return seq, False


def _failed(op, group_name, seq, count, dtype, t0, e):
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    state = "timed-out" if "timed out" in text.lower() or "timeout" in text.lower() else "failed"
    probe.collective(op, state, group_name, seq, count, dtype,
                     in_flight_ms=int((time.monotonic() - t0) * 1000), error=text[:500])
    flight.ended(op, group_name, seq, completed=False)
    flight.dump("timeout" if state == "timed-out" else "failed")  # as c10d's watchdog does
    probe.error(probe.classify(e), "%s: %s" % (type(e).__name__, text))


def run(op, group_name, fn, args, kwargs, count=None, dtype=None):
    """Runs one collective `fn(*args, **kwargs)` under the probe: events, faults, timing."""
    if count is None:
        count, dtype = _size(args)
    seq, dropped = _begin(op, group_name, count, dtype, _fr_io(op, args, count))
    if dropped:
        return _Done() if kwargs.get("async_op") else None
    t0 = time.monotonic()
    try:
        out = fn(*args, **kwargs)
        if kwargs.get("async_op") and out is not None:
            out.wait()
    except Exception as e:  # noqa: BLE001 - reported, then raised again
        _failed(op, group_name, seq, count, dtype, t0, e)
        raise
    finally:
        probe.add_comm_time(time.monotonic() - t0)
    probe.collective(op, "completed", group_name, seq, count, dtype)
    flight.ended(op, group_name, seq)
    return out


def _wrapper(op, fn):
    def wrapped(*args, **kwargs):
        g = kwargs.get("group")
        name = "world" if g is None or g is dist.group.WORLD else "group%d" % id(g)
        if name != "world" and name not in _ranked:
            _ranked.add(name)
            try:  # c10d's name of the group: the same on every rank (fr_trace checks it)
                from torch.distributed import distributed_c10d as c10d
                pg_name = getattr(g, "group_name", None) or c10d._pg_names.get(g)
                flight.group_ranks(name, dist.get_process_group_ranks(g), pg_name)
            except Exception:  # noqa: BLE001 - torch without them: order of first use, no ranks
                pass
        return run(op, name, fn, args, kwargs)

    wrapped.__wrapped__ = fn
    wrapped.__name__ = fn.__name__
    return wrapped


_ranked = set()  # subgroups whose ranks the flight recorder has


def wrap():
    """Replaces torch.distributed's collectives by reporting ones (idempotent), and takes SIGUSR2
    for flight-recorder dumps under the harness (faultline_probe.flight; from the main thread)."""
    global _faults
    _faults = parse_faults(os.environ.get("FAULTLINE_PROBE_FAULTS", ""))
    ms = os.environ.get("FAULTLINE_COMM_TIMEOUT_MS", "")
    if ms.isdigit() and int(ms) > 0:
        flight.set_timeout_ms(int(ms))
    flight.install()
    for op in _OPS:
        fn = getattr(dist, op, None)
        if fn is None or op in _originals:
            continue
        _originals[op] = fn
        setattr(dist, op, _wrapper(op, fn))
    return _faults


_world = [None, 0]  # the default group the size was read from, its size


def _world_size():
    g = dist.group.WORLD
    if _world[0] is not g:
        _world[0], _world[1] = g, dist.get_world_size()
    return _world[1]


def allreduce_hook(state, bucket):
    """A DDP communication hook: the gradient bucket's all-reduce (averaged, as DDP's default
    hook does) under the probe, in group `ddp`, asynchronous like DDP's own (the backward goes on
    while it runs). Register with ddp.register_comm_hook(None, allreduce_hook).

    Averaging multiplies by 1/world, as DDP's built-in path does: with any comm hook DDP copies
    the gradients into the bucket unscaled, so the hook pays one pass over the bucket that DDP
    alone fuses into that copy, and a multiply is the cheaper pass (half a division's time here)."""
    tensor = bucket.buffer()
    world = _world_size()
    count, dtype = tensor.numel(), _dtype(tensor)
    seq, dropped = _begin("all_reduce", "ddp", count, dtype)
    if dropped:
        fut = torch.futures.Future()
        fut.set_result(tensor.mul_(1.0 / world))
        return fut
    t0 = time.monotonic()
    fn = _originals.get("all_reduce", dist.all_reduce)
    try:
        work = fn(tensor, async_op=True)
    except Exception as e:  # noqa: BLE001 - reported, then raised again
        _failed("all_reduce", "ddp", seq, count, dtype, t0, e)
        raise

    def done(f):
        try:
            out = f.value()[0]
        except Exception as e:  # noqa: BLE001 - reported; DDP raises it in the backward
            _failed("all_reduce", "ddp", seq, count, dtype, t0, e)
            raise
        probe.add_comm_time(time.monotonic() - t0)
        probe.collective("all_reduce", "completed", "ddp", seq, count, dtype)
        flight.ended("all_reduce", "ddp", seq)
        return out.mul_(1.0 / world)

    return work.get_future().then(done)


# ---- DDP: the probe's comm hook only where a fault point needs it --------------------------------

_MODES = ("auto", "hook", "light")


def ddp_mode(rank=None):
    """How attach() reports this rank's DDP bucket all-reduces: ('hook' | 'light', why).

    FAULTLINE_PROBE_DDP=hook|light forces a mode; auto (the default) takes `hook` only when a
    fault point of FAULTLINE_PROBE_FAULTS can fire on them (op all_reduce or any, group ddp or
    none given, rank this one or none given), else `light`."""
    want = os.environ.get("FAULTLINE_PROBE_DDP", "") or "auto"
    if want not in _MODES:
        raise ValueError("FAULTLINE_PROBE_DDP: '%s' (allowed: %s)" % (want, ", ".join(_MODES)))
    if want != "auto":
        return want, "FAULTLINE_PROBE_DDP=" + want
    r = _rank() if rank is None else rank
    faults = _faults if _originals else parse_faults(os.environ.get("FAULTLINE_PROBE_FAULTS", ""))
    for f in faults:
        c = f["cond"]
        if f["op"] in ("all_reduce", "any") and c.get("group", "ddp") == "ddp" and \
                c.get("rank", r) == r:
            return "hook", "fault point " + f["text"]
    return "light", "no fault point on this rank's DDP all-reduces"


def attach(model):
    """Reports a DistributedDataParallel model's gradient-bucket all-reduces (group `ddp`).

    `hook` mode registers allreduce_hook (the all-reduce runs through Python: fault points work,
    comm_s counts it). `light` mode keeps DDP's built-in C++ all-reduce and derives the events
    on the main thread from DDP's own state, with no Python code on gloo's threads: the bucket
    layout from the reducer (again after DDP rebuilds its buckets), `started` for every bucket
    when a gradient hook on a parameter of the first bucket runs (before any bucket can be
    ready), `completed` at the next probe.step() or synced backward (DDP's backward returns only
    when every bucket's all-reduce is done), `failed`/`timed-out` when the job dies of an
    exception in between.
    Events carry "derived": true. By default (ddp_events: lazy) they are written only for the
    steps that need them: a step whose bucket layout was read (the first, after a rebuild), a
    backward still under way after FAULTLINE_PROBE_DDP_QUIET_MS (written by the heartbeat
    thread with the time it began: a hang shows its buckets in flight), and one that dies; a
    healthy step's buckets take their seq numbers all the same, so the seqs agree with a hook-
    mode peer's. Returns the mode and emits it, with the events policy, as a `probe_mode` event."""
    mode, why = ddp_mode()
    if mode == "light" and not probe.enabled():
        return "off"  # outside the harness with no fault point: nothing to report
    info = {"ddp_comm": mode, "why": why}
    _Rebuild(model)
    if mode == "hook":
        model.register_comm_hook(None, allreduce_hook)
    else:
        info["ddp_events"] = "every" if _Light(model).every else "lazy"
    probe.event("probe_mode", info)
    return mode


_EVENTS = ("lazy", "every")


def ddp_events():
    """Which steps light mode writes its derived bucket events for: FAULTLINE_PROBE_DDP_EVENTS=
    lazy (the default: a step whose buckets are read anew -- the first, and after DDP rebuilds
    them --, and a step whose backward is still under way after FAULTLINE_PROBE_DDP_QUIET_MS,
    default 250, or dies; a healthy step's buckets are counted in the seqs but not written) or
    every (every bucket of every step)."""
    v = os.environ.get("FAULTLINE_PROBE_DDP_EVENTS", "") or "lazy"
    if v not in _EVENTS:
        raise ValueError("FAULTLINE_PROBE_DDP_EVENTS: '%s' (allowed: %s)" % (v, ", ".join(_EVENTS)))
    return v


def _derived(state, seq, count, dtype, tail="", t_ns=None):
    probe._put('"collective"', -1, '{"op":"all_reduce","state":%s,"group":"ddp","seq":%d,'
               '"count":%d,"dtype":%s,"derived":true%s}',
               (probe._q(state), seq, count, probe._q(dtype), tail), True, t_ns)


class _Rebuild:
    """DDP's one bucket-order broadcast for the flight recorder: Reducer::_rebuild_buckets, at the
    start of the forward after the first backward, broadcasts the order from rank 0 in C++, on the
    default group. A forward pre-hook records it started, a forward hook ended; both hooks go once
    DDP says it rebuilt. A rank whose peer never runs that forward (uneven inputs) waits in it.
    A forward that was expected to rebuild and did not leaves its entry retired, not completed."""

    def __init__(self, model):
        self.model, self.entry = model, None
        self.hooks = []
        if not model._has_rebuilt_buckets and (getattr(model, "static_graph", False)
                                               or not model.find_unused_parameters):
            self.hooks = [model.register_forward_pre_hook(self.before),
                          model.register_forward_hook(self.after)]

    def before(self, module, inputs):
        m = self.model
        if self.entry is None and torch.is_grad_enabled() and m.num_iterations >= 1 \
                and not m._has_rebuilt_buckets:
            # Reducer::sync_bucket_indices: the bucket-ordered parameter indices (and their
            # count), then the bucket sizes, two broadcasts from rank 0 (the second's length,
            # the new number of buckets, is not known before: 1 is written).
            n = sum(1 for p in m.module.parameters() if p.requires_grad)
            self.entry = flight.started_block("broadcast", "world",
                                              [(n + 1, n + 1, "int32"), (1, 1, "int32")])

    def after(self, module, inputs, output):
        rebuilt = self.model._has_rebuilt_buckets
        if self.entry is not None:
            flight.ended_block(self.entry, completed=rebuilt)  # not rebuilt: it did not happen
            self.entry = None
        if rebuilt:
            for h in self.hooks:
                h.remove()
            self.hooks = []


class _Light:
    """Light mode's bookkeeping for one DDP model (see attach). No hook per forward: one
    persistent gradient hook on a parameter of DDP's first bucket (a bucket's all-reduce starts
    only when all its parameters' gradients are in, and DDP starts the buckets in order, so the
    hook runs before any of the backward's all-reduces) says a synced backward began; DDP's
    num_iterations (counting the forwards that sync) tells it from a no_sync() one. A healthy
    step costs the hook's call and a few assignments; events are formatted only when written."""

    def __init__(self, model):
        self.model = model
        self.iters = model.num_iterations  # DDP's count at the last backward taken
        self.layout_of = None  # DDP's _has_rebuilt_buckets when the layout was read
        self.buckets = []      # [(count, dtype)] in DDP's bucket order (the order they reduce)
        self.hooked = set()    # ids of the parameters with the hook
        self.first = None      # a parameter of the first bucket (of the layout last read)
        self.param = next((p for p in model.module.parameters() if p.requires_grad), None)
        self.every = ddp_events() == "every"
        self.quiet_s = probe._env_ms("FAULTLINE_PROBE_DDP_QUIET_MS", 250) / 1000.0
        self.lock = threading.Lock()  # the backward under way, against the heartbeat thread
        self.began = False     # a synced backward under way (its seqs taken)
        self.seq0 = 0          # the seq of its first bucket
        self.t_mono = 0.0      # when it began
        self.shown = False     # its `started` events are written (or waiting to be)
        self.full = False      # the buckets were read anew: this step's events are written
        self.fr = None         # its flight-recorder entry (faultline_probe.flight)
        self._layout()
        self._hook_first()
        self.mark = self._grad_mark()
        probe._step_hooks.append(self.settle)
        probe._fatal_hooks.append(self.fail)
        if not self.every:
            probe._idle_hooks.append(self.idle)

    def _layout(self):
        m = self.model
        self.layout_of = m._has_rebuilt_buckets
        order = sorted(m.reducer._get_zeros_like_grad_buckets(), key=lambda b: b.index())
        self.buckets = [(b.buffer().numel(), _dtype(b.buffer())) for b in order]
        self.fr_sizes = [(c, c, d) for c, d in self.buckets]  # in place: in = out
        first = order[0].parameters() if order else []
        self.first = first[0] if first else None
        self.full = True

    def _hook_first(self):
        # Outside a backward only (at attach and at a step): a layout read during the backward
        # gets its hook at the next step; the old first bucket's hook serves until then.
        p = self.first
        if p is not None and id(p) not in self.hooked:
            self.hooked.add(id(p))
            p.register_hook(self.grad_hook)

    def _grad_mark(self):
        g = self.param.grad if self.param is not None else None
        return None if g is None else (id(g), g._version)

    def grad_hook(self, grad):
        if self.model.num_iterations != self.iters:  # the first hooked gradient of a synced
            self.iters = self.model.num_iterations   # backward
            self._begin()
        return None

    def _begin(self):
        if self.began:  # the previous backward, with no probe.step() since
            self._complete()
        if self.model._has_rebuilt_buckets is not self.layout_of:
            self._layout()
        key = ("all_reduce", "ddp")
        seq = _seq.get(key, 0)
        _seq[key] = seq + len(self.buckets)
        self.fr = flight.started_block("all_reduce", "ddp", self.fr_sizes)
        with self.lock:
            self.seq0, self.t_mono, self.began = seq, time.monotonic(), True
            if self.every or self.full:
                self._show()

    def _each(self):
        return [(self.seq0 + i, c, d) for i, (c, d) in enumerate(self.buckets)]

    def _show(self):  # holds self.lock
        t_ns = time.time_ns() - int((time.monotonic() - self.t_mono) * 1e9)  # when it began
        for seq, count, dtype in self._each():
            _derived("started", seq, count, dtype, t_ns=t_ns)
        self.shown = True

    def _complete(self):
        with self.lock:
            if self.fr is not None:
                flight.ended_block(self.fr)
                self.fr = None
            if self.shown:
                for seq, count, dtype in self._each():
                    _derived("completed", seq, count, dtype)
            self.began, self.shown, self.full = False, False, False

    def idle(self):
        """The heartbeat thread's tick: a backward under way for quiet_s has its buckets
        written as started (with the time it began), so that a hang shows them in flight."""
        if not self.began or self.shown:
            return
        with self.lock:
            if self.began and not self.shown and time.monotonic() - self.t_mono >= self.quiet_s:
                self._show()
                probe.flush()

    def settle(self):
        """At probe.step(): the backward before it is done (DDP's backward returns only when
        every bucket's all-reduce is)."""
        if self.model.num_iterations != self.iters and self._grad_mark() != self.mark:
            self.iters = self.model.num_iterations  # a synced backward the hook missed (its
            self._begin()                           # parameter unused), gradients changed
        if self.began:
            self._complete()
        if self.first is not None and id(self.first) not in self.hooked:
            self._hook_first()
        self.mark = self._grad_mark()

    def fail(self, exc):
        if not self.began:
            return
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        state = "timed-out" if "timed out" in text.lower() or "timeout" in text.lower() else "failed"
        import json
        with self.lock:
            if not self.shown:
                self._show()
            for seq, count, dtype in self._each():
                _derived(state, seq, count, dtype, ',"error":%s' % json.dumps(text[:500]))
            if self.fr is not None:
                flight.ended_block(self.fr, completed=False)
                self.fr = None
            self.began, self.shown = False, False
        flight.dump("timeout" if state == "timed-out" else "failed")
        probe.flush()
