#!/usr/bin/python3
"""The probe's own cost, in-process and in CPU time (steadier than wall time on a busy host).

One process, a gloo world of 1 (so a collective costs its bookkeeping, not the network):
  - one probe event of each hot kind (collective, a section's begin and end, step) and a
    generic event();
  - one dist.all_reduce of 16 floats, torch's own against faultline_probe.torch's wrapper;
  - one DDP step of bench/torch_probe_overhead.sh's model (batch 64, hidden 512, 1 thread) with
    DDP's built-in all-reduce against the probe's comm hook plus the step's section and step
    events (what ddp_train.py adds under the harness), interleaved over rounds; the per-round
    ratio's median and range and each side's best round are printed (on a VM the hypervisor's
    steal can count as the process's CPU time: the best round is the least disturbed).
Usage: bench/torch_probe_micro.py SOURCE_DIR [rounds]
"""
import os
import statistics
import sys
import tempfile
import time

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
sys.path.insert(0, os.path.join(src, "python"))
tmp = tempfile.mkdtemp(prefix="faultline-probe-micro-")
os.environ.update(FAULTLINE_PROBE_FILE=os.path.join(tmp, "probe.jsonl"), MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(20000 + os.getpid() % 10000), RANK="0", WORLD_SIZE="1",
                  FAULTLINE_PROBE_STACKS="0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import faultline_probe as probe  # noqa: E402
import faultline_probe.torch as fpt  # noqa: E402


def cpu_us(fn, n):
    t = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - t) / n * 1e6


def best(fn, n, reps=5):  # the median of reps: a preempted rep costs CPU in caches, not in time
    return statistics.median(cpu_us(fn, n) for _ in range(reps))


torch.set_num_threads(1)
dist.init_process_group("gloo")
probe.event("hello", {"via": "micro"})
n = 20000


def section_pair(i):
    with probe.section("step"):
        pass


print("probe event, CPU: collective %.2f us, section begin+end %.2f us, step %.2f us, "
      "generic event() %.2f us"
      % (best(lambda i: probe.collective("all_reduce", "started", "ddp", i, 82689, "float32"), n),
         best(section_pair, n),
         best(lambda i: probe.step(i, loss=0.25, step_time_s=0.001), n),
         best(lambda i: probe.event("custom", {"i": i, "name": "x"}), n)))

t16 = torch.ones(16)
original = dist.all_reduce
fpt.wrap()
wrapped = dist.all_reduce
o = best(lambda i: original(t16), 3000)
w = best(lambda i: wrapped(t16), 3000)
print("all_reduce of 16 floats (world 1), CPU per call: torch %.1f us, wrapped %.1f us (+%.1f us: "
      "two collective events, the fault check, timing)" % (o, w, w - o))


def model(hooked):
    torch.manual_seed(0)
    m = DDP(torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 1)))
    if hooked:
        m.register_comm_hook(None, fpt.allreduce_hook)
    return m, torch.optim.SGD(m.parameters(), lr=0.01), hooked


x, y = torch.randn(64, 64), torch.randn(64, 1)


def steps(m, opt, hooked, count=30):
    section = probe.section if hooked else None
    t = time.process_time()
    for i in range(count):
        if hooked:
            with section("step"):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                probe.step(i, loss=loss.item(), step_time_s=0.001)
        else:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            loss.item()
    return (time.process_time() - t) / count * 1e6


plain, probed = model(False), model(True)
steps(*plain), steps(*probed)
a, b = [], []
for r in range(rounds):
    first, second = (plain, probed) if r % 2 == 0 else (probed, plain)
    u, v = steps(*first), steps(*second)
    (a.append(u), b.append(v)) if r % 2 == 0 else (a.append(v), b.append(u))
ratios = sorted(q / p for p, q in zip(a, b))
print("DDP step (world 1), CPU: built-in all-reduce %.1f us (best round %.1f), probe's hook + 3 "
      "events %.1f us (best %.1f); per-round ratio median %.4f (range %.3f-%.3f, %d rounds)"
      % (statistics.median(a), min(a), statistics.median(b), min(b), statistics.median(ratios),
         ratios[0], ratios[-1], rounds))
dist.destroy_process_group()
os._exit(0)  # see ddp_train.py: torch 1.13's teardown with a Python comm hook can deadlock
