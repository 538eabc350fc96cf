#!/usr/bin/python3
"""A small DDP training job on CPU ranks (gloo) for faultline's torch suite (issue 21).

Runs under torchrun or as one process per rank with the env:// contract (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), reports through the faultline probe when the harness gives it a file,
and has the switches of the real bugs the torch scenarios reproduce:

  --shard stride        each rank takes samples[rank::world] (uneven shards when the world does
                        not divide the samples); --join is PyTorch's fix (DDP's Join context)
  --metric-rank0        rank 0 alone all-reduces a metric every --metric-every steps (a
                        collective the other ranks never issue)
  --eval-leak           the per-step evaluation runs without torch.no_grad() and sums its
                        losses as tensors, so every evaluation's autograd graph and activations
                        stay alive: host memory grows each step (--eval, the fix, evaluates the
                        same batches under no_grad and sums floats)
  --bad-token-at STEP   rank --bad-token-rank looks token id 96 up in a 64-row embedding at
                        that step (a tokenizer with a larger vocabulary than the model): torch
                        raises "IndexError: index out of range in self" on that rank alone
  --no-probe            no probe at all (the overhead baseline, bench/torch_probe_overhead.sh)

The entry point is under torchelastic's @record, as torchrun's documentation asks: an exception
leaves its message and traceback in TORCHELASTIC_ERROR_FILE (torchrun's agent sets one per
worker, the harness one per rank), where torchrun and the harness read which rank failed first.
"""

import argparse
import os
import sys
import time
from datetime import timedelta


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--samples", type=int, default=0, help="one epoch over this many samples")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--shard", choices=["sampler", "stride"], default="sampler")
    p.add_argument("--join", action="store_true", help="DDP's Join context for uneven inputs")
    p.add_argument("--metric-rank0", action="store_true")
    p.add_argument("--metric-every", type=int, default=5)
    p.add_argument("--eval", action="store_true", help="evaluate a batch after every step")
    p.add_argument("--eval-leak", action="store_true")
    p.add_argument("--eval-batch", type=int, default=4096)
    p.add_argument("--timeout-s", type=float, default=0,
                   help="collective timeout (default: FAULTLINE_COMM_TIMEOUT_MS, else 60 s)")
    p.add_argument("--checkpoint", default="", help="rank 0 saves the model here at the end")
    p.add_argument("--bad-token-at", type=int, default=-1)
    p.add_argument("--bad-token-rank", type=int, default=1)
    p.add_argument("--no-probe", action="store_true")
    p.add_argument("--print-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    return p.parse_args()


class NoProbe:
    """The probe's interface doing nothing (--no-probe)."""

    def __getattr__(self, name):
        if name == "section":
            from contextlib import nullcontext
            return lambda *a, **k: nullcontext()
        return lambda *a, **k: None


def main():
    args = parse()
    if args.no_probe:
        probe = NoProbe()
    else:
        import faultline_probe as probe
        probe.init(backend="gloo")
    with probe.section("setup"):
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.set_num_threads(args.threads)
        timeout = args.timeout_s or float(os.environ.get("FAULTLINE_COMM_TIMEOUT_MS", "0")) / 1000
        timeout = timedelta(seconds=timeout or 60)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's store
            dist.init_process_group("gloo", timeout=timeout)
        else:
            # env:// by hand, so that reaching the store gets the rendezvous deadline
            # (FAULTLINE_RDZV_TIMEOUT_MS) and only collectives the collective one: on a busy
            # host rank 0 may take longer to import torch than a collective may take.
            rdzv = float(os.environ.get("FAULTLINE_RDZV_TIMEOUT_MS", "0")) / 1000
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                  rank == 0, timedelta(seconds=rdzv or 60))
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                    timeout=timeout)
        rank, world = dist.get_rank(), dist.get_world_size()
        if not args.no_probe:
            import faultline_probe.torch as fpt
            fpt.wrap()
        torch.manual_seed(args.seed)
        layers, width = [], args.features
        for _ in range(args.layers):
            layers += [torch.nn.Linear(width, args.hidden), torch.nn.ReLU()]
            width = args.hidden
        layers.append(torch.nn.Linear(width, 1))
        model = DDP(torch.nn.Sequential(*layers))
        if not args.no_probe:
            fpt.attach(model)  # light (DDP's C++ all-reduce) unless a fault point needs the hook
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        w_true = torch.randn(args.features, 1, generator=torch.Generator().manual_seed(1))

    def sample(i):
        g = torch.Generator().manual_seed(args.seed * 1000003 + i)
        x = torch.randn(args.features, generator=g)
        return x, x @ w_true + 0.01 * torch.randn(1, generator=g)

    if args.samples > 0:
        if args.shard == "stride":
            mine = list(range(args.samples))[rank::world]  # uneven when world does not divide
        else:  # DistributedSampler's way: padded so every rank gets as many
            per = -(-args.samples // world)
            idx = [i % args.samples for i in range(per * world)]
            mine = idx[rank::world]
        batches = [mine[i:i + args.batch] for i in range(0, len(mine), args.batch)]
    else:
        batches = [list(range((s * world + rank) * args.batch, (s * world + rank + 1) * args.batch))
                   for s in range(args.steps)]

    step_ends = []  # for the overhead bench: wall and CPU time between consecutive step ends
    cpu_ends = []

    def train():
        history = 0.0
        step_ends.append(time.perf_counter())
        cpu_ends.append(time.process_time())
        for step, ids in enumerate(batches):
            with probe.section("step"):
                if step == args.bad_token_at and rank == args.bad_token_rank:
                    vocab = torch.nn.Embedding(64, 4)  # the model's; the tokenizer knows 96+
                    vocab(torch.tensor([96]))
                xs, ys = zip(*(sample(i) for i in ids))
                x, y = torch.stack(xs), torch.stack(ys)
                t0 = time.perf_counter()
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                if args.eval or args.eval_leak:
                    xe = torch.randn(args.eval_batch, args.features,
                                     generator=torch.Generator().manual_seed(step))
                    if args.eval_leak:  # a tensor sum keeps each evaluation's graph alive
                        history = history + model.module(xe).pow(2).mean()
                    else:
                        with torch.no_grad():
                            history += model.module(xe).pow(2).mean().item()
                if args.metric_rank0 and rank == 0 and (step + 1) % args.metric_every == 0:
                    m = loss.detach().clone()
                    dist.all_reduce(m)  # only rank 0 issues it
                probe.step(step, loss=loss.item(), step_time_s=time.perf_counter() - t0)
            step_ends.append(time.perf_counter())
            cpu_ends.append(time.process_time())  # every thread of the rank, the probe's too
            if args.print_every and step % args.print_every == 0:
                print("rank %d step %d loss %.4f" % (rank, step, loss.item()), flush=True)
        return len(batches)

    if args.join:
        from torch.distributed.algorithms.join import Join
        with Join([model]):
            n = train()
    else:
        n = train()
    with probe.section("checkpoint"):
        dist.barrier()
        if rank == 0 and args.checkpoint:
            torch.save(model.module.state_dict(), args.checkpoint)
    def quantile(ends, q):  # of the gaps between step ends; the first step is warm-up
        gaps = sorted(b - a for a, b in zip(ends[1:], ends[2:]))
        return gaps[int(q * (len(gaps) - 1) + 0.5)] if gaps else 0.0

    # The 10th percentile is the step undisturbed by other processes on a busy host.
    print("rank %d done: %d steps, median step %.6f s, cpu %.6f s; p10 step %.6f s, cpu %.6f s" %
          (rank, n, quantile(step_ends, 0.5), quantile(cpu_ends, 0.5), quantile(step_ends, 0.1),
           quantile(cpu_ends, 0.1)), flush=True)
    import resource  # the process's whole CPU time (the bench's CPU accounting)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("rank %d process cpu %.6f s" % (rank, ru.ru_utime + ru.ru_stime), flush=True)
    dist.destroy_process_group()
    probe.flush()  # what the probe still holds in memory: os._exit below skips atexit
    # The model holds the last references to the process group (DDP's reducer) and, on rank 0,
    # the store's server: were they freed when main() returns, ProcessGroupGloo's destructor
    # would run there, in this thread, holding the GIL (see the end of the file). Kept alive
    # here, nothing is destroyed before os._exit.
    _KEEP.append(model)
    return 0


_KEEP = []


if __name__ == "__main__":
    # torchelastic's @record (imported here: its torch import is then outside the probe's setup
    # section, which starts in main).
    from torch.distributed.elastic.multiprocessing.errors import record
    code = record(main)()
    # Leave without the interpreter's teardown: with a Python DDP comm hook, torch 1.13 can
    # deadlock there (ProcessGroupGloo's destructor, run from the Reducer's, joins a gloo thread
    # that waits for the GIL the destructor's thread holds; seen under torchrun, the worker
    # never exits). Everything is flushed and the process group destroyed by now (removed from
    # torch.distributed's tables; the object itself lives in _KEEP until the process ends).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
