#!/usr/bin/env python3
"""Which of triage's adaptations keep a base scenario's mechanism (docs/triage-history.md, stop 47).

For each base triage can draft from (scenarios/symptoms and scenarios/issues: a reference.symptom,
a fix, no extends), applies each adaptation draft.cpp makes, alone, as `--set` overrides (the
same values the draft writes: ranks with dp recomputed, tp, pp, nodes, ZeRO stage, CPU offload,
precision, launcher), and runs the fault variant (`faultline run -q`): does it still reproduce
the base's symptom (`--adapt ranks8+tp2`: a combination, as a draft that read both writes it)?
An adaptation the loader refuses is "invalid" (the draft leaves those out already).
A base whose `reference.needs` names the adaptation's key is "kept" (the draft keeps the base's
value) unless --ignore-needs. Writes one TSV row per (base, adaptation); stdlib only.

  mechanism_matrix.py --faultline build/harness/faultline --out matrix.tsv [--only 4.3,5.1]
      [--adapt ranks8,zero0] [--dirs scenarios/symptoms] [--timeout 90]
Run it from a scratch folder: the runs land under its results/runs.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ADAPTATIONS = ["ranks8", "ranks4", "tp2", "pp2", "nodes2", "zero0", "zero1", "zero3", "offload",
               "fp16", "bf16", "deepspeed", "mpirun"]


def resolved(fl, path):
    """topology and a few workload keys of the resolved scenario (validate --print)."""
    out = subprocess.run([fl, "validate", path, "--print"], capture_output=True, text=True)
    keys, section, sub = {}, None, None
    for line in out.stdout.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        k, _, v = line.strip().partition(":")
        v = v.strip()
        if indent == 0:
            section, sub = k, None
            if v:
                keys[k] = v
        elif indent == 2:
            sub = k
            keys[f"{section}.{k}"] = v
        elif indent == 4 and sub:
            keys[f"{section}.{sub}.{k}"] = v
    return keys


def overrides(adapt, k):
    """The --set values triage's draft writes for one adaptation, or None when it makes none.
    `a+b` is a combination, as a draft that read both writes it: b applied to the scenario as a
    left it (tp2 after ranks8 divides the 8 ranks); None when either part makes nothing there."""
    if "+" in adapt:
        keys, merged = dict(k), {}
        for part in adapt.split("+"):
            sets = overrides(part, keys)
            if sets is None:
                return None
            for s in sets:
                key, _, value = s.partition("=")
                keys[key] = value
                merged.pop(key, None)
                merged[key] = value
        return [f"{key}={value}" for key, value in merged.items()]
    ranks, tp, pp = int(k.get("topology.ranks", 1)), int(k.get("topology.tp", 1)), \
        int(k.get("topology.pp", 1))
    layout = []
    if adapt.startswith("ranks"):
        n = max(int(adapt[5:]), ranks)
        if n == ranks or n % (tp * pp):
            return None
        layout = [f"topology.ranks={n}", f"topology.dp={n // (tp * pp)}"]
    elif adapt in ("tp2", "pp2"):
        new_tp, new_pp = (2, pp) if adapt == "tp2" else (tp, 2)
        if (new_tp, new_pp) == (tp, pp) or ranks % (new_tp * new_pp):
            return None
        layout = [f"topology.tp={new_tp}", f"topology.pp={new_pp}",
                  f"topology.dp={ranks // (new_tp * new_pp)}"]
    elif adapt == "nodes2":
        if ranks % 2 or k.get("topology.nodes") == "2":
            return None
        layout = ["topology.nodes=2"]
    elif adapt.startswith("zero"):
        if k.get("topology.zero") == adapt[4:]:
            return None
        # nor stage 0 for a base that offloads: draft.cpp keeps its stage (stop 50).
        if adapt == "zero0" and k.get("workload.zero.offload_optimizer") == "true":
            return None
        layout = [f"topology.zero={adapt[4:]}"]
    elif adapt == "offload":
        # draft.cpp makes the offload only beside a ZeRO stage of 1-3: at stage 0 it is the
        # workers' config error, as DeepSpeed's CPUAdam fails its first step
        # (docs/triage-history.md, stop 48).
        if k.get("workload.zero.offload_optimizer") == "true" or \
                k.get("topology.zero", "0") == "0":
            return None
        layout = ["workload.zero.offload_optimizer=true"]
    elif adapt in ("fp16", "bf16"):
        if k.get("workload.precision") == adapt:
            return None
        layout = [f"workload.precision={adapt}"]
    elif adapt in ("deepspeed", "mpirun"):
        if k.get("topology.launcher") not in ("auto", "local", "mpirun") or \
                k.get("topology.launcher") == adapt:
            return None
        layout = [f"topology.launcher={adapt}"]
    return layout


def needed_key(sets, kept, base=None):
    """The first key the overrides change from the base's value (`base`: resolved()) that the
    base needs, or "": draft.cpp leaves out an adaptation that changes any needed key (a layout
    changes dp with tp or pp)."""
    for s in sets:
        key, _, value = s.partition("=")
        if key in kept and (base is None or base.get(key) != value):
            return key
    return ""


def needs(path):
    """reference.needs of the scenario file (a flow list on its own line or in the reference map)."""
    text = open(path).read()
    at = text.find("needs:")
    if at < 0:
        return []
    inner = text[text.find("[", at) + 1:text.find("]", at)]
    return [x.strip().strip("\"'") for x in inner.split(",") if x.strip()]


def run(fl, path, sets, timeout):
    """`faultline run -q` of the fault variant: did it reproduce the base's symptom?"""
    cmd = [fl, "run", path, "-q"]
    for s in sets:
        cmd += ["--set", s]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    lines = r.stdout.splitlines()
    verdict = next((l.strip() for l in lines if l.strip().startswith("verdict")), "")
    observed = next((l.strip() for l in lines if l.strip().startswith("observed")), "")
    if " reproduced (oracle" in verdict and "not reproduced" not in verdict:
        return "reproduced", observed
    if "not reproduced" in verdict:
        return "not-reproduced", observed
    return f"rc{r.returncode}", (verdict or r.stderr.strip())[:160]


def bases(fl, dirs, only, start):
    for d in dirs:
        for f in sorted(os.listdir(d)):
            path = os.path.join(d, f)
            if not f.endswith(".yaml"):
                continue
            text = open(path).read()
            if "\nfix:" not in text or text.startswith("extends") or "\nextends:" in text:
                continue
            if only and not any(f.startswith(o) or o in f for o in only):
                continue
            if start and f < start:
                continue
            yield path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faultline", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dirs", default="scenarios/symptoms,scenarios/issues")
    ap.add_argument("--only", default="")
    ap.add_argument("--start", default="", help="skip the bases whose file name sorts before it")
    ap.add_argument("--adapt", default=",".join(ADAPTATIONS))
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("--ignore-needs", action="store_true")
    a = ap.parse_args()
    fl = os.path.abspath(a.faultline)
    dirs = [os.path.join(ROOT, d) for d in a.dirs.split(",")]
    only = [o for o in a.only.split(",") if o]
    with open(a.out, "a") as out:
        if out.tell() == 0:
            out.write("base\tadaptation\tresult\tseconds\tdetail\n")
        for path in bases(fl, dirs, only, a.start):
            k = resolved(fl, path)
            shown = os.path.relpath(path, ROOT)
            t0 = time.time()
            base_result, detail = run(fl, path, [], a.timeout)
            out.write(f"{shown}\tnone\t{base_result}\t{time.time() - t0:.1f}\t{detail}\n")
            out.flush()
            if base_result != "reproduced":
                continue
            kept = [] if a.ignore_needs else needs(path)
            for adapt in a.adapt.split(","):
                sets = overrides(adapt, k)
                if sets is None:
                    continue
                if needed_key(sets, kept, k):
                    out.write(f"{shown}\t{adapt}\tkept\t0\treference.needs: "
                              f"{needed_key(sets, kept, k)}\n")
                    continue
                v = subprocess.run([fl, "validate", path] + sum([["--set", s] for s in sets], []),
                                   capture_output=True, text=True)
                vf = subprocess.run([fl, "validate", path, "--fix"] +
                                    sum([["--set", s] for s in sets], []),
                                    capture_output=True, text=True)
                if v.returncode or vf.returncode:
                    out.write(f"{shown}\t{adapt}\tinvalid\t0\t{(v.stderr or vf.stderr).strip()[:160]}\n")
                    continue
                t0 = time.time()
                result, detail = run(fl, path, sets, a.timeout)
                out.write(f"{shown}\t{adapt}\t{result}\t{time.time() - t0:.1f}\t{detail[:160]}\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
