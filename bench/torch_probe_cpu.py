#!/usr/bin/python3
"""The probe's CPU cost inside the ranks of the real 2-rank DDP job, with no other process's load
in the measure: one job, three identical DDP models in each rank, stepped in turns of BLOCK steps
(the order rotating every round, both ranks alike, so the host's load drifts over all three):
  plain  DDP's built-in C++ all-reduce, no probe call at all (the job alone);
  light  the probe's light mode (faultline_probe.torch._Light: DDP's all-reduce, the bucket
         events derived on the main thread) plus the step's section and step events;
  hook   the probe's Python comm hook (allreduce_hook) plus the same events.
Per block: the process's CPU time (every thread: gloo's, the probe's heartbeat) and wall time.
The probe's heartbeat thread (which also writes the events that waited FAULTLINE_PROBE_FLUSH_MS)
is accounted apart: its CPU per second of the process's life, charged to a step by its wall time.
The probe's file is real (events written with write(2), as under the harness). Prints, per rank
and pooled, the median over rounds of light/plain and hook/plain (CPU and wall) with the IQR, and
the extra CPU per step in microseconds.
With a faultline binary as 4th argument the two ranks run under `faultline run` as a command
workload (the harness gives them their probe files and reads them every 100 ms, as for any job):
then the light/plain A/B also holds the harness's handling of the events that fall in a block,
and rank 0 reads the harness's own CPU (every thread of its parent, /proc/PPID/task/*/schedstat)
at the start and the end of the measured rounds, so its share of that window's wall time -- all
the time it can have taken from the ranks -- is reported beside the A/B: the A/B plus the
harness's and the heartbeat thread's whole shares bound the step-time overhead of harness +
probe from above, measured in one run with no run-to-run noise in it.
The model is ddp_train.py's in the overhead bench (64 features, 2 x 512 hidden, batch 64: a step
of about 5 ms of CPU here); FAULTLINE_BENCH_HIDDEN and FAULTLINE_BENCH_BATCH change the hidden
width and the batch (1024 and 256: about 22 ms). The probe's cost is per step, not per
parameter, so its share falls as the step grows.
Usage: bench/torch_probe_cpu.py SOURCE_DIR [rounds] [block] [faultline]
       (launches its 2 ranks itself, or through faultline run)"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
block = int(sys.argv[3]) if len(sys.argv) > 3 else 30


def q(v, p):
    v = sorted(v)
    k = (len(v) - 1) * p
    f = int(k)
    return v[f] + (v[min(f + 1, len(v) - 1)] - v[f]) * (k - f)




def bootstrap(v, reps=2000):
    """90% interval of the median of v (resampled with a fixed seed)."""
    import random
    rng = random.Random(21)
    meds = sorted(statistics.median(rng.choices(v, k=len(v))) for _ in range(reps))
    return q(meds, .05), q(meds, .95)


def launch_self():
    tmp = tempfile.mkdtemp(prefix="faultline-probe-cpu-")
    port = str(20000 + os.getpid() % 10000)
    procs = []
    for r in (0, 1):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, FAULTLINE_PROBE_STACKS="0",
                   FAULTLINE_PROBE_FILE=os.path.join(tmp, "rank%d.jsonl" % r),
                   PYTHONPATH=os.path.join(src, "python"))
        procs.append(subprocess.Popen([sys.executable, __file__, src, str(rounds), str(block)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("torch_probe_cpu: a rank failed: %s" % [p.returncode for p in procs])
    return outs


def launch_harness(faultline):
    """The two ranks as a command workload of `faultline run`; their stdout from output.log."""
    tmp = tempfile.mkdtemp(prefix="faultline-probe-cpu-")
    scenario = os.path.join(tmp, "probe-cpu.yaml")
    with open(scenario, "w") as f:
        f.write("name: torch-probe-cpu\n"
                "topology: {ranks: 2, dp: 2}\n"
                "workload:\n  kind: command\n"
                "  command: %s\n"
                "env: {FAULTLINE_PROBE_STACKS: '0', FAULTLINE_BENCH_HIDDEN: '%s', "
                "FAULTLINE_BENCH_BATCH: '%s', FAULTLINE_PROBE_FR: '%s'}\n"
                "timeouts: {comm_ms: 120000, run_s: 1200}\n"
                "expect: {oracle: completed}\n"
                % (json.dumps([sys.executable, os.path.abspath(__file__), "{source_dir}",
                               str(rounds), str(block)]),
                   os.environ.get("FAULTLINE_BENCH_HIDDEN", "512"),
                   os.environ.get("FAULTLINE_BENCH_BATCH", "64"),
                   os.environ.get("FAULTLINE_PROBE_FR", "1")))
    runs = os.path.join(tmp, "runs")
    rc = subprocess.call([faultline, "run", scenario, "--results", runs, "--run-id", "ab", "-q"])
    logs = [os.path.join(runs, "ab", "ranks", "rank%d" % r, "output.log") for r in (0, 1)]
    if rc != 0 or not all(os.path.exists(p) for p in logs):
        sys.exit("torch_probe_cpu: faultline run exited %d; the run is in %s" % (rc, runs))
    outs = [open(p).read() for p in logs]
    import shutil
    shutil.rmtree(tmp)
    return outs


if os.environ.get("RANK") is None:  # the launcher: two ranks, then the summary
    faultline = sys.argv[4] if len(sys.argv) > 4 else ""
    load0 = open("/proc/loadavg").read().split()[:3]
    outs = launch_harness(faultline) if faultline else launch_self()
    load1 = open("/proc/loadavg").read().split()[:3]
    # The last JSON line of each rank's output (the harness's log prefixes its time and stream).
    blocks = [json.loads([x[x.index('{"plain"'):] for x in o.splitlines() if '{"plain"' in x][-1])
              for o in outs]
    print("torch_probe_cpu: %d rounds of %d-step blocks per arm, 2 ranks%s; load %s -> %s"
          % (rounds, block, " under faultline run" if faultline else "", " ".join(load0),
             " ".join(load1)))
    pooled = {"light": {"cpu": [], "wall": []}, "hook": {"cpu": [], "wall": []}}
    extra = {"light": [], "hook": []}
    plain_cpu = []
    for r, b in enumerate(blocks):
        for arm in ("light", "hook"):
            for kind, k in (("cpu", 0), ("wall", 1)):
                ratios = [x[k] / y[k] for x, y in zip(b[arm], b["plain"])]
                pooled[arm][kind] += ratios
                print("  rank %d %-5s/plain %-4s median %.4f IQR %.4f-%.4f" %
                      (r, arm, kind, statistics.median(ratios), q(ratios, .25), q(ratios, .75)))
            extra[arm] += [(x[0] - y[0]) / block * 1e6 for x, y in zip(b[arm], b["plain"])]
        plain_cpu += [y[0] / block * 1e6 for y in b["plain"]]
        print("  rank %d probe code's own CPU per step (thread_time): light median %.1f us "
              "(mean %.1f), hook median %.1f us (mean %.1f)"
              % (r, b["spent_us_per_step"]["light"], b["spent_mean_us_per_step"]["light"],
                 b["spent_us_per_step"]["hook"], b["spent_mean_us_per_step"]["hook"]))
        print("    where (mean per step): " + ", ".join(
            "%s %.1f us" % kv for kv in sorted(b["parts_us_per_step"].items())))
    beat = statistics.mean(b["beat_cpu_us_per_s"] for b in blocks)
    print("  heartbeat thread (heartbeats + flush wakes): %.1f us of CPU per second of wall"
          % beat)
    base = statistics.median(plain_cpu)
    print("  plain step CPU per rank: median %.0f us (IQR %.0f-%.0f, min %.0f)" %
          (base, q(plain_cpu, .25), q(plain_cpu, .75), min(plain_cpu)))
    plain_wall = statistics.median(y[1] / block * 1e6 for b in blocks for y in b["plain"])
    print("  plain step wall per rank: median %.0f us; the heartbeat thread's share of it: %.1f us"
          % (plain_wall, beat * plain_wall / 1e6))
    for arm in ("light", "hook"):
        own = statistics.mean(b["spent_us_per_step"][arm] for b in blocks)
        print("  %s: probe code's own CPU / plain step CPU = %.2f%% (against the min: %.2f%%)"
              % (arm, own / base * 100, own / min(plain_cpu) * 100))
        own += beat * plain_wall / 1e6
        print("  %s: with the heartbeat thread's share: %.1f us per step = %.2f%% (against the "
              "min: %.2f%%)" % (arm, own, own / base * 100, own / min(plain_cpu) * 100))
    for arm in ("light", "hook"):
        for kind in ("cpu", "wall"):
            v = pooled[arm][kind]
            print("  both ranks %-5s/plain %-4s median %.4f IQR %.4f-%.4f" %
                  (arm, kind, statistics.median(v), q(v, .25), q(v, .75)))
        print("  %s: extra CPU per step per rank median %.1f us (IQR %.1f-%.1f)" %
              (arm, statistics.median(extra[arm]), q(extra[arm], .25), q(extra[arm], .75)))
    # Step time: the ranks run in lock step, so a round's block wall is the mean of the two
    # ranks' (not pooled: that would count each round twice).
    beat_share = sum(b["beat_cpu_us_per_s"] for b in blocks) / 1e6  # both ranks' threads
    harness = blocks[0].get("harness_cpu_s")
    harness_share = harness / blocks[0]["window_s"] if harness is not None else 0.0
    if harness is not None:
        print("  harness (faultline, every thread): %.3f s of CPU over the %.2f s of measured "
              "rounds = %.2f%% of that wall time" % (harness, blocks[0]["window_s"],
                                                     harness_share * 100))
    for arm in ("light", "hook"):
        v = [(x0[1] + x1[1]) / (y0[1] + y1[1]) for x0, x1, y0, y1 in
             zip(blocks[0][arm], blocks[1][arm], blocks[0]["plain"], blocks[1]["plain"])]
        lo, hi = bootstrap(v)
        med = statistics.median(v)
        print("  step time %s/plain (per round, both ranks): median %.4f, IQR %.4f-%.4f, "
              "bootstrap 90%% of the median %.4f-%.4f" % (arm, med, q(v, .25), q(v, .75), lo, hi))
        print("  %s: step-time overhead bound = A/B %+.2f%% + heartbeat threads %.2f%% + "
              "harness %.2f%% = %.2f%% (with the interval's top: %.2f%%)"
              % (arm, (med - 1) * 100, beat_share * 100, harness_share * 100,
                 (med - 1 + beat_share + harness_share) * 100,
                 (hi - 1 + beat_share + harness_share) * 100))
    sys.exit(0)

sys.path.insert(0, os.path.join(src, "python"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import faultline_probe as probe  # noqa: E402
import faultline_probe.torch as fpt  # noqa: E402

torch.set_num_threads(1)
t_start = time.monotonic()
probe.init()
dist.init_process_group("gloo")
fpt.wrap()
rank = dist.get_rank()

# The probe's own CPU, counted by the thread that runs it (time.thread_time: time other processes
# take from this one is not counted, so the host's load does not enter): the light mode's
# gradient hook and the step's events (with its settle()), and the hook mode's comm hook (on gloo's thread; its completion callback and the copy DDP
# adds for any comm hook are not in it: the A/B ratio above shows those).
spent = {"light": 0.0, "hook": 0.0}
before = dict(spent)
per_step = {"light": [], "hook": []}


parts = {}  # where it goes: seconds per part over the measured rounds


def timed(arm, fn, part):
    def wrapper(*a, **k):
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            d = time.thread_time() - t
            spent[arm] += d
            parts[part] = parts.get(part, 0.0) + d
    return wrapper


# light mode's one gradient hook (its settle() runs inside probe.step(), timed with the events)
fpt._Light.grad_hook = timed("light", fpt._Light.grad_hook, "light gradient hook")


HIDDEN = int(os.environ.get("FAULTLINE_BENCH_HIDDEN", "512"))
BATCH = int(os.environ.get("FAULTLINE_BENCH_BATCH", "64"))


def make():  # ddp_train.py's model in the overhead bench: 64 features, 2 x HIDDEN hidden
    torch.manual_seed(7)
    return DDP(torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                                   torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                                   torch.nn.Linear(HIDDEN, 1)))


models = {"plain": make(), "light": make(), "hook": make()}
fpt._Light(models["light"])
_hook = timed("hook", fpt.allreduce_hook, "hook comm hook call")
models["hook"].register_comm_hook(None, lambda state, bucket: _hook(state, bucket))
opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
g = torch.Generator().manual_seed(rank)
x, y = torch.randn(BATCH, 64, generator=g), torch.randn(BATCH, 1, generator=g)
n = [0]


def run(arm, count):
    m, opt = models[arm], opts[arm]
    t, w = time.process_time(), time.perf_counter()
    for _ in range(count):
        if arm == "plain":
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            loss.item()
        else:  # the step's section and step events, timed like the hooks
            t0 = time.thread_time()
            sec = probe.section("step")
            sec.__enter__()
            t1 = time.thread_time()
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            lv = loss.item()
            t2 = time.thread_time()
            probe.step(n[0], loss=lv, step_time_s=0.001)
            sec.__exit__(None, None, None)
            t3 = time.thread_time()
            spent[arm] += (t1 - t0) + (t3 - t2)
            key = arm + " section+step events"
            parts[key] = parts.get(key, 0.0) + (t1 - t0) + (t3 - t2)
            per_step[arm].append(spent[arm] - before[arm])
            before[arm] = spent[arm]
        n[0] += 1
    return time.process_time() - t, time.perf_counter() - w




def harness_cpu():
    """The CPU seconds of every thread of this rank's parent when it is the harness, else None
    (a thread that ends between two readings takes its time with it: the harness's are
    long-lived)."""
    ppid = os.getppid()
    try:
        if open("/proc/%d/comm" % ppid).read().strip() != "faultline":
            return None
        total = 0
        for t in os.listdir("/proc/%d/task" % ppid):
            try:
                total += int(open("/proc/%d/task/%s/schedstat" % (ppid, t)).read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return total / 1e9
    except OSError:
        return None


for arm in models:  # warm-up (and DDP's bucket rebuild)
    run(arm, 5)
spent.update(light=0.0, hook=0.0)
parts.clear()
before = dict(spent)
per_step = {"light": [], "hook": []}
out = {k: [] for k in models}
arms = list(models)
h0, w0 = harness_cpu(), time.monotonic()
for r in range(rounds):
    order = arms[r % 3:] + arms[:r % 3]
    for arm in order:
        out[arm].append(run(arm, block))
h1, w1 = harness_cpu(), time.monotonic()
if h0 is not None and h1 is not None:
    out["harness_cpu_s"], out["window_s"] = h1 - h0, w1 - w0
dist.barrier()
# The probe's heartbeat thread (heartbeats, and between them a wake every FAULTLINE_PROBE_FLUSH_MS
# to write what waits): its CPU over the whole process's life, per second of wall time (it runs
# whatever the arm, so it is not in the arms' A/B; a step pays it for the step's wall time).
beat_cpu = time.clock_gettime(time.pthread_getcpuclockid(probe._beat.ident))
out["beat_cpu_us_per_s"] = beat_cpu / (time.monotonic() - t_start) * 1e6
# A step's probe CPU: the median over steps (a step whose thread was preempted, or on a VM lost
# time to the hypervisor inside the probe's code, counts more than it cost; the median does not
# follow those), and the mean.
out["spent_us_per_step"] = {k: statistics.median(v) * 1e6 for k, v in per_step.items()}
out["parts_us_per_step"] = {k: v / (rounds * block) * 1e6 for k, v in parts.items()}
out["spent_mean_us_per_step"] = {k: v / (rounds * block) * 1e6 for k, v in spent.items()}
print(json.dumps(out), flush=True)
dist.destroy_process_group()
os._exit(0)  # see ddp_train.py: torch 1.13's teardown with a Python comm hook can deadlock
