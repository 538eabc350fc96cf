#!/usr/bin/python3
"""ctest python.probe: the Python probe writes the C library's line format (what the harness's
ProbeIngest reads): one JSON object per line with seq, time_unix_ns, kind, step, data; a step's
interval and comm_s filled in; sections; an uncaught exception reported as an error event; and
nothing at all without FAULTLINE_PROBE_FILE. The torch wrapper's fault grammar is checked when
torch is there, and so is DDP's light mode (a world of one): the bucket all-reduces derived from
DDP's state, with the seq, counts and dtypes the comm hook reports, none for a forward under
no_grad or no_sync, the layout read again after DDP rebuilds its buckets, a failure reported on
the all-reduces in flight; with the default lazy events, only the steps that need them
written (a new layout, a backward held up -- written by the heartbeat thread while it waits --,
one that dies) and the seqs counting the others; and which mode a fault plan selects.
Usage: python_probe_test.py SOURCE_DIR"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

src = os.path.abspath(sys.argv[1])
env = dict(os.environ, PYTHONPATH=os.path.join(src, "python"), WORLD_SIZE="2", LOCAL_RANK="1")
job = """
import faultline_probe as p, time
p.init(heartbeat_ms=50)
with p.section("setup"):
    time.sleep(0.12)
p.add_comm_time(0.25)
p.step(0, loss=1.5)
p.step(1, loss=float("nan"))
p.collective("all_reduce", "timed-out", group="ddp", seq=3, count=10, dtype="float32")
raise RuntimeError("[gloo] Timed out waiting 3000ms for recv operation to complete")
"""
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "probe.jsonl")
    r = subprocess.run([sys.executable, "-c", job], env=dict(env, FAULTLINE_PROBE_FILE=path),
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Timed out" in r.stderr, (r.returncode, r.stderr)
    lines = [json.loads(l) for l in open(path)]
    for e in lines:
        assert set(e) == {"seq", "time_unix_ns", "kind", "step", "data"}, e
    assert [e["seq"] for e in lines] == list(range(len(lines))), "seq has gaps"
    kinds = [e["kind"] for e in lines if e["kind"] != "heartbeat"]
    assert kinds == ["hello", "section", "section", "step", "step", "collective", "error"], kinds
    assert any(e["kind"] == "heartbeat" for e in lines), "no heartbeat from the thread"
    hello = lines[0]["data"]
    assert hello["world_size"] == 2 and hello["local_rank"] == 1 and hello["pid"] > 0, hello
    steps = [e for e in lines if e["kind"] == "step"]
    assert steps[0]["step"] == 0 and steps[0]["data"]["loss"] == 1.5
    assert steps[0]["data"]["comm_s"] == 0.25 and steps[1]["data"]["comm_s"] == 0.0
    # The first interval starts when setup ends, not at init: it is shorter than the time from
    # the setup's start to the step by about the setup's 0.12 s (whatever the machine's load).
    setup_begin = [e for e in lines if e["kind"] == "section"][0]["time_unix_ns"]
    since_setup_s = (steps[0]["time_unix_ns"] - setup_begin) / 1e9
    assert steps[0]["data"]["interval_s"] < since_setup_s - 0.06, (steps[0], since_setup_s)
    assert steps[1]["data"]["loss"] is None
    err = [e for e in lines if e["kind"] == "error"][0]["data"]
    assert err["class"] == "comm timeout" and err["exit_code"] == 1, err
    # Without a file: nothing written, no error.
    r = subprocess.run([sys.executable, "-c", "import faultline_probe as p; "
                        "assert not p.init(); assert not p.step(0, loss=1.0)"],
                       env=env, capture_output=True, text=True, cwd=d)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(d)) == ["probe.jsonl", "stacks.txt", "stacks_on_signal"], os.listdir(d)
    # SIGUSR1 (announced in stacks_on_signal) writes every thread's Python stack and the job
    # goes on; FAULTLINE_PROBE_STACKS=0 leaves the signal alone.
    path2 = os.path.join(d, "sub", "probe.jsonl")
    os.mkdir(os.path.dirname(path2))
    waiter = ("import faultline_probe as p, sys, time\np.init(heartbeat_ms=50)\n"
              "def parked_in_job():\n    sys.stdin.readline()\nparked_in_job()\n")
    proc = subprocess.Popen([sys.executable, "-c", waiter], env=dict(env, FAULTLINE_PROBE_FILE=path2),
                            stdin=subprocess.PIPE, text=True)
    ann = os.path.join(d, "sub", "stacks_on_signal")
    for _ in range(500):
        if os.path.exists(ann):
            break
        time.sleep(0.02)
    assert int(open(ann).read()) == proc.pid
    # The heartbeat thread is started before the announcement but may not have reached
    # _heartbeats yet on a loaded machine; its first beat (sent at once) says it has.
    for _ in range(500):
        if '"kind":"heartbeat"' in open(path2).read():
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGUSR1)
    stacks = os.path.join(d, "sub", "stacks.txt")
    for _ in range(500):
        if "parked_in_job" in open(stacks).read():
            break
        time.sleep(0.02)
    text = open(stacks).read()
    assert "parked_in_job" in text and "_heartbeats" in text, text
    proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0, proc.returncode
    # Odd strings in the hot events' formatted lines stay valid JSON.
    path4 = os.path.join(d, "odd", "probe.jsonl")
    os.mkdir(os.path.dirname(path4))
    odd = 'g"1\\\n\u00e9'
    r = subprocess.run([sys.executable, "-c", "import faultline_probe as p, sys\n"
                        "p.collective('all_reduce', 'started', sys.argv[1], 2, 5, sys.argv[1])\n"
                        "with p.section(sys.argv[1]): pass\n"
                        "p.step(3, loss=1e-300, step_time_s=0.5)\n", odd],
                       env=dict(env, FAULTLINE_PROBE_FILE=path4))
    got = [json.loads(l) for l in open(path4)]
    assert r.returncode == 0 and len(got) == 4, (r.returncode, got)
    assert got[0]["data"] == {"op": "all_reduce", "state": "started", "group": odd, "seq": 2,
                              "count": 5, "dtype": odd}, got[0]
    assert [g["data"] for g in got[1:3]] == [{"name": odd, "state": "begin"},
                                             {"name": odd, "state": "end"}], got
    assert got[3]["step"] == 3 and got[3]["data"]["loss"] == 1e-300, got[3]
    path3 = os.path.join(d, "off", "probe.jsonl")
    os.mkdir(os.path.dirname(path3))
    r = subprocess.run([sys.executable, "-c", "import faultline_probe as p; assert p.init()"],
                       env=dict(env, FAULTLINE_PROBE_FILE=path3, FAULTLINE_PROBE_STACKS="0"))
    assert r.returncode == 0 and os.listdir(os.path.dirname(path3)) == ["probe.jsonl"]
try:
    import torch  # noqa: F401
except ImportError:
    print("python.probe: passed (torch wrapper grammar skipped: no torch)")
    sys.exit(0)
sys.path.insert(0, os.path.join(src, "python"))
import faultline_probe.torch as fpt  # noqa: E402

f = fpt.parse_faults("all_reduce[rank=1,seq=5,group=ddp]=hang; barrier=delay(0.5)")
assert [x["action"] for x in f] == ["hang", "delay"] and f[1]["delay"] == 0.5, f
assert f[0]["cond"] == {"rank": 1, "seq": 5, "group": "ddp"}, f
for bad in ["allreduce=hang", "all_reduce[rank=x]=hang", "all_reduce=explode", "all_reduce[who=1]=drop"]:
    try:
        fpt.parse_faults(bad)
        raise AssertionError("accepted: " + bad)
    except ValueError as e:
        assert bad.split("=")[0].split("[")[0] in str(e) or "condition" in str(e), e

# Which mode: the hook only where a fault point can fire on this rank's DDP all-reduces.
def mode(faults, rank, forced=""):
    os.environ["FAULTLINE_PROBE_FAULTS"], os.environ["FAULTLINE_PROBE_DDP"] = faults, forced
    return fpt.ddp_mode(rank)[0]


assert mode("", 0) == "light"
assert mode("all_reduce[seq=5,group=ddp]=hang", 1) == "hook"
assert mode("all_reduce[rank=1,seq=5]=hang", 1) == "hook"
assert mode("all_reduce[rank=1,seq=5]=hang", 0) == "light"
assert mode("any[group=ddp]=delay(1)", 0) == "hook"
assert mode("all_reduce[group=world]=drop; barrier=hang", 0) == "light"
assert mode("all_reduce[rank=1]=drop", 0, "hook") == "hook"
assert mode("any=hang", 0, "light") == "light"
try:
    mode("", 0, "fast")
    raise AssertionError("accepted FAULTLINE_PROBE_DDP=fast")
except ValueError as e:
    assert "FAULTLINE_PROBE_DDP" in str(e) and "light" in str(e), e
os.environ.pop("FAULTLINE_PROBE_FAULTS")
os.environ.pop("FAULTLINE_PROBE_DDP")

# Light mode in a world of one: a model of two dtypes (so two buckets from the start) whose
# buckets DDP rebuilds after the first step (a 1 MB cap splits the float64 part).
light_job = """
import os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import faultline_probe as probe, faultline_probe.torch as fpt
probe.init()
dist.init_process_group("gloo")
fpt.wrap()
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.a, s.b, s.c = torch.nn.Linear(8, 64), torch.nn.Linear(64, 512).double(), torch.nn.Linear(512, 512).double()
    def forward(s, x):
        return s.c(torch.relu(s.b(torch.relu(s.a(x)).double()))).sum()
m = DDP(M(), bucket_cap_mb=1)
assert fpt.attach(m) == "light"
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(3):
    opt.zero_grad()
    m(torch.randn(4, 8)).backward()
    opt.step()
    probe.step(i)
    with torch.no_grad():
        m(torch.randn(4, 8))              # no all-reduce follows: nothing reported
    with m.no_sync():
        m(torch.randn(4, 8)).backward()   # gradient accumulation: no all-reduce either
    probe.step(100 + i)
print("BUCKETS", [(b.buffer().numel(), str(b.buffer().dtype)) for b in
                  sorted(m.reducer._get_zeros_like_grad_buckets(), key=lambda b: b.index())])
out = m(torch.randn(4, 8))
def die(grad):  # the first layer's gradient comes last: the backward (and the probe's hook on
    # the first bucket) has begun, then gloo gives up
    raise RuntimeError("[gloo] Timed out waiting 5000ms for recv operation to complete")
m.module.a.weight.register_hook(die)
out.backward()
"""
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "probe.jsonl")
    r = subprocess.run([sys.executable, "-c", light_job], capture_output=True, text=True,
                       env=dict(env, FAULTLINE_PROBE_FILE=path, FAULTLINE_PROBE_STACKS="0",
                                FAULTLINE_PROBE_DDP_EVENTS="every",
                                RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                                MASTER_PORT=str(20000 + os.getpid() % 10000)))
    assert r.returncode == 1 and "Timed out" in r.stderr, (r.returncode, r.stderr[-2000:])
    final = eval(r.stdout.split("BUCKETS", 1)[1].strip())  # noqa: S307 - our own print
    ev = [json.loads(l) for l in open(path)]
    modes = [e["data"] for e in ev if e["kind"] == "probe_mode"]
    assert modes and modes[0]["ddp_comm"] == "light" and modes[0]["ddp_events"] == "every", modes
    colls = [(e["data"], e["step"]) for e in ev if e["kind"] in ("collective", "step")]
    ddp = [c for c, _ in colls if c.get("group") == "ddp"]
    assert all(c["derived"] is True and c["op"] == "all_reduce" for c in ddp), ddp
    # Per step: every bucket started (seq in order), then every one completed, then the step.
    seq, order = 0, [(c.get("state"), c.get("seq"), s) for c, s in colls]
    steps = [s for st, _, s in order if st is None]
    assert steps == [0, 100, 1, 101, 2, 102], steps
    assert len({c["count"] for c in ddp if c["seq"] < 2}) == 2, ddp[:4]  # two dtypes: 2 buckets
    last = [(c["count"], "torch." + c["dtype"]) for c in ddp
            if c["state"] == "timed-out"]
    assert last == final and len(final) > 2, (last, final)  # rebuilt: the 1 MB cap splits it
    for c in ddp[-len(final):]:
        assert c["state"] == "timed-out" and "Timed out" in c["error"], c
    started = [c["seq"] for c in ddp if c["state"] == "started"]
    assert started == list(range(len(started))), started
    done = [c["seq"] for c in ddp if c["state"] == "completed"]
    assert done == started[:len(done)] and len(started) - len(done) == len(final), (started, done)
    i = 0
    for st, sq, s in order:  # between step events, no completion precedes a start of its step
        if st == "started":
            assert sq not in done[:i], (sq, i)
        elif st == "completed":
            i += 1
    errors = [e for e in ev if e["kind"] == "error"]
    assert errors and errors[0]["data"]["class"] == "comm timeout", errors
    assert ev.index(errors[0]) > max(ev.index(e) for e in ev if e["kind"] == "collective")

# The same model with the default events policy (lazy): the steps whose bucket layout is read
# (the first, and the one after DDP's rebuild) are written in full; healthy steps after them
# only take their seq numbers; a backward held up (here by a gradient hook that waits for it)
# has its buckets written as started by the heartbeat thread while it waits, completed at the
# step; the backward that dies has them started and timed-out.
lazy_job = light_job.split("out = m(torch.randn(4, 8))")[0].replace(
    "for i in range(3):", "for i in range(5):") + """
stuck = [True]
def wait_for_started(grad):  # the last gradient of step 6: the probe's hook has run
    if stuck[0]:
        stuck[0] = False
        first = fpt._seq[("all_reduce", "ddp")] - len(m.reducer._get_zeros_like_grad_buckets())
        line = '"state":"started","group":"ddp","seq":%d,' % first
        for _ in range(3000):  # the heartbeat thread writes it while this backward waits
            if line in open(os.environ["FAULTLINE_PROBE_FILE"]).read():
                print("HELD UP: started seen", first, flush=True)
                break
            time.sleep(0.02)
m.module.a.weight.register_hook(wait_for_started)
opt.zero_grad()
m(torch.randn(4, 8)).backward()
probe.step(6)
out = m(torch.randn(4, 8))
def die(grad):
    raise RuntimeError("[gloo] Timed out waiting 5000ms for recv operation to complete")
m.module.b.weight.register_hook(die)
out.backward()
"""
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "probe.jsonl")
    r = subprocess.run([sys.executable, "-c", "import time\n" + lazy_job], capture_output=True,
                       text=True, env=dict(env, FAULTLINE_PROBE_FILE=path, FAULTLINE_PROBE_STACKS="0",
                                           RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                                           MASTER_PORT=str(20001 + os.getpid() % 10000)))
    assert r.returncode == 1 and "Timed out" in r.stderr, (r.returncode, r.stderr[-2000:])
    assert "HELD UP: started seen" in r.stdout, r.stdout[-2000:]
    final = eval(r.stdout.split("BUCKETS", 1)[1].split("HELD UP")[0].strip())  # noqa: S307
    ev = [json.loads(l) for l in open(path)]
    modes = [e["data"] for e in ev if e["kind"] == "probe_mode"]
    assert modes and modes[0]["ddp_events"] == "lazy", modes
    order = [(e["data"].get("state"), e["data"].get("seq"), e["step"]) for e in ev
             if e["kind"] == "step" or (e["kind"] == "collective" and e["data"]["group"] == "ddp")]
    steps = [s for st, _, s in order if st is None]
    assert steps == [0, 100, 1, 101, 2, 102, 3, 103, 4, 104, 6], steps
    nb, n0 = len(final), sum(1 for st, _, s in order if st == "started") - 3 * len(final)
    # step 0: the first layout (n0 buckets); step 1: the rebuilt one (nb); 2-4: not written;
    # step 6: held up; then the dying backward: the seqs count the steps not written
    want = [("started", q, None) for q in range(n0)] + [("completed", q, None) for q in range(n0)]
    want += [("step", None, 0), ("step", None, 100)]
    want += [("started", n0 + q, None) for q in range(nb)] + \
        [("completed", n0 + q, None) for q in range(nb)] + [("step", None, s) for s in (1, 101)]
    want += [("step", None, s) for s in (2, 102, 3, 103, 4, 104)]
    six = n0 + 4 * nb  # steps 1-4 took nb seqs each
    want += [("started", six + q, None) for q in range(nb)] + \
        [("completed", six + q, None) for q in range(nb)] + [("step", None, 6)]
    want += [("started", six + nb + q, None) for q in range(nb)] + \
        [("timed-out", six + nb + q, None) for q in range(nb)]
    got = [(st or "step", sq, s if st is None else None) for st, sq, s in order]
    assert n0 >= 1 and got == want, (n0, nb, got)
    errors = [e for e in ev if e["kind"] == "error"]
    assert errors and errors[0]["data"]["class"] == "comm timeout", errors

# The flight recorder (faultline_probe.flight): PyTorch's dump schema; DDP's buckets and the
# world's collectives share the default group's collective_seq_ids; completed, open and retired
# entries; the pickle (protocol 2) equals the JSON; SIGUSR2 dumps from the watcher thread while
# the main thread is blocked, the job going on; nothing is taken outside the harness.
fr_job = """
import faultline_probe as p, faultline_probe.flight as fr, os, sys
p.init(heartbeat_ms=50)
fr.group_ranks("group9", [1, 3], name="7")
fr.started("all_reduce", "ddp", 0, 1000, "float32"); fr.ended("all_reduce", "ddp", 0)
fr.started("broadcast", "world", 0, 8, "int64"); fr.ended("broadcast", "world", 0)
fr.started("all_gather", "group9", 0, 4, "bfloat16", out_count=8)
fr.started("all_reduce", "ddp", 1, 1000, "float32"); fr.ended("all_reduce", "ddp", 1, completed=False)
fr.started("all_reduce", "ddp", 2, 1000, "float32")
b = fr.started_block("all_reduce", "ddp", [(300, 300, "float32"), (200, 200, "float16")])
fr.started("send", "world", 0, 5, "float32")  # point to point: not in c10d's collective seqs
fr.ended_block(b)
print("installed", fr.install(), flush=True)
sys.stdin.readline()  # blocked in a read, as a rank in a collective
"""
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "probe.jsonl")
    proc = subprocess.Popen([sys.executable, "-c", fr_job], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(env, FAULTLINE_PROBE_FILE=path, FAULTLINE_RUN_ID="t",
                                     RANK="1", FAULTLINE_PROBE_STACKS="0"))
    assert proc.stdout.readline().strip() == "installed True"
    assert int(open(os.path.join(d, "fr_dump_on_signal")).read()) == proc.pid
    os.kill(proc.pid, signal.SIGUSR2)
    dump = os.path.join(d, "nccl_trace_rank_1")
    for _ in range(500):
        if os.path.exists(dump):
            break
        time.sleep(0.02)
    import pickle
    with open(dump, "rb") as f:
        t = pickle.load(f)
    with open(os.path.join(d, "fr_trace_rank_1.json")) as f:
        assert json.loads(json.dumps(t)) == json.load(f)
    proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0, proc.returncode  # the signal did not end the job
    assert t["version"] == "2.10", t["version"]
    assert t["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                              "7": {"name": "7", "desc": "undefined", "ranks": "[1, 3]"}}, t["pg_config"]
    assert t["pg_status"]["0"] == {"last_enqueued_collective": 5, "last_started_collective": 5,
                                   "last_completed_collective": 5}, t["pg_status"]
    got = [(e["profiling_name"], e["process_group"], e["collective_seq_id"], e["state"],
            e["retired"], e["input_sizes"], e["input_dtypes"], e["output_sizes"])
           for e in t["entries"]]
    assert got == [
        ("nccl:all_reduce", ("0", "default_pg"), 0, "completed", True, [[1000]], ["Float"], [[1000]]),
        ("nccl:broadcast", ("0", "default_pg"), 1, "completed", True, [[8]], ["Long"], [[8]]),
        ("nccl:all_gather", ("7", "undefined"), 0, "started", False, [[4]], ["BFloat16"], [[8]]),
        ("nccl:all_reduce", ("0", "default_pg"), 2, "started", True, [[1000]], ["Float"], [[1000]]),
        ("nccl:all_reduce", ("0", "default_pg"), 3, "started", False, [[1000]], ["Float"], [[1000]]),
        ("nccl:all_reduce", ("0", "default_pg"), 4, "completed", True, [[300]], ["Float"], [[300]]),
        ("nccl:all_reduce", ("0", "default_pg"), 5, "completed", True, [[200]], ["Half"], [[200]]),
    ], got
    for e in t["entries"]:
        assert [e["record_id"], e["op_id"], e["p2p_seq_id"], e["is_p2p"], e["frames"]] == \
            [t["entries"].index(e), e["collective_seq_id"], 0, False, []], e
        assert (e["duration_ms"] is None) == (e["time_discovered_completed_ns"] is None), e
    # Outside the harness (no FAULTLINE_RUN_ID) SIGUSR2 is left alone and nothing announced.
    r = subprocess.run([sys.executable, "-c", "import faultline_probe.flight as fr; "
                        "assert not fr.install()"], capture_output=True, text=True,
                       env=dict(env, FAULTLINE_PROBE_FILE=os.path.join(d, "x", "probe.jsonl")))
    assert r.returncode == 0, r.stderr
print("python.probe: passed")
