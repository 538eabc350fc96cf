#!/usr/bin/env python3
"""The faultline GPT and its training step written in PyTorch eager, as the reference for
fl-train --device cuda (bench/gpu_vs_pytorch.sh runs both on the same GPU and config).

Same model as workloads/model/gpt.cpp: learned token and position embeddings; pre-LN blocks of
causal multi-head attention (fused qkv linear, explicit softmax(q kᵀ / sqrt(hs)) v with the causal
mask, output projection) and an MLP (4x, tanh GELU); final layer norm; untied LM head without
bias; mean cross-entropy. Same step: AdamW (betas 0.9/0.95, eps 1e-8, no weight decay), global
gradient-norm clipping at 1.0. --precision fp32: fp32 with TF32 off (as fl-train's cuBLAS SGEMMs);
--precision bf16: the forward under torch.autocast(device_type="cuda", dtype=torch.bfloat16)
(bf16 tensor-core matmuls with fp32 accumulation, fp32 master weights and optimizer; as
fl-train --precision bf16 on a GPU). Synthetic tokens.
Prints one JSON line: {"tokens_per_s": median over the timed steps, ...}. --profile FILE: then
3 more steps under torch.profiler, and FILE gets one JSON line per kernel (or op, on the CPU) with
its calls and its own device time, the heaviest first: the reference's side of
bench/gpu_profile.sh's per-op table.
"""
import contextlib
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def attention(self, x, mask):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x, mask):
        x = x + self.proj(self.attention(self.ln1(x), mask))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, C, L, NH, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        self.head = nn.Linear(C, V, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.head(self.lnf(x))
        # targets is a slice of the sampled tokens (idx[:, 1:]), not contiguous: reshape, not view.
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke test)")
    ap.add_argument("--profile", metavar="FILE", help="per-kernel device time of 3 more steps")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = GPT(a.vocab, a.d_model, a.layers, a.heads, a.seq_len).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0, foreach=True)
    gen = torch.Generator(device=dev).manual_seed(7)

    def autocast():
        if a.precision == "bf16":
            return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step():
        idx = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), device=dev, generator=gen)
        with autocast():
            loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()  # one host sync per step, as fl-train reads its loss

    times, losses = [], []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        losses.append(step())
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    if a.profile:
        profile(a.profile, step, sync, dev)
    tokens = a.micro_batch * a.seq_len
    print(json.dumps({
        "impl": "pytorch-eager" if a.precision == "fp32" else "pytorch-autocast-bf16",
        "precision": a.precision,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "tokens_per_s": tokens / statistics.median(times),
        "step_ms_median": 1e3 * statistics.median(times),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "params": sum(p.numel() for p in model.parameters()),
    }))


def profile(path, step, sync, dev, steps=3):
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    activity = ProfilerActivity.CUDA if dev.type == "cuda" else ProfilerActivity.CPU
    with torch_profile(activities=[activity]) as prof:
        for _ in range(steps):
            step()
        sync()

    def own_time(e):  # microseconds; the attribute's name moved between releases
        for name in (("self_device_time_total", "self_cuda_time_total") if dev.type == "cuda"
                     else ("self_cpu_time_total",)):
            if hasattr(e, name):
                return getattr(e, name)
        return 0.0
    rows = sorted(prof.key_averages(), key=own_time, reverse=True)
    with open(path, "w") as f:
        for e in rows:
            if own_time(e) > 0:
                f.write(json.dumps({"op": e.key, "calls": e.count, "steps": steps,
                                    "ms": own_time(e) / 1e3}) + "\n")


if __name__ == "__main__":
    main()
