#!/usr/bin/python3
"""Traceback frames as learned evidence of `faultline triage` (stop 53): frames.yaml.

The stage a failure happened in is written in the functions its stack passes through:
`from_pretrained`, `load_checkpoint`, `initialize` (preparation), `train_batch`, `backward`,
`step` (training), `generate` (inference), `init_process_group`, `rendezvous` (set-up). This
module reads the frames of an input's lines, the same way harness/triage/ranker_frames.cpp does
(tests/triage/data/frames_fixture.txt holds both to the same tokens):

  Python traceback   File "/x/site-packages/deepspeed/runtime/engine.py", line 12, in backward
  Python log prefix  [engine.py:1234:step]   (DeepSpeed's logger: file, line, function)
  source reference   ProcessGroupNCCL.cpp:1234, /x/torch/distributed/elastic/api.py:874
  C++ frame          #3 0x00007f in ns::func (...)   frame #2: c10d::ProcessGroupNCCL::watchdog()
                     Exception raised from ncclCommWatchdog at ...

A frame becomes tokens: its function (`backward`) and module:function
(`deepspeed.runtime.engine:backward`); a source reference without a function `module:`; a module
of three or more parts also its package's first two (`deepspeed.runtime.*`); and each word of
three or more letters of its module's and function's names, split at `_` (`~load`, `~checkpoint`). A Python
path is masked to its package-relative module (after site-packages, dist-packages or lib/python3.x,
else from the last directory named like a known package, else the file's own name); a C/C++ file
is its name without the extension; a C++ qualified name `a::b::f` is module `a.b`, function `f`.
All lower-case.

learn_ranker.py writes frames.yaml next to priors.yaml (each fold of --cv from its training
issues): for each frame token in --min-df (2) or more tune failures, the failures holding it per
stage, and the failures with any frame token per stage. The ranker smooths them into a naive
Bayes P(stage | frames) and adds cues.yaml frames_stage_weight times it to an inferred stage's
score. The test split is never read (learn_ranker.py's tune_issues skips it first).

Usage:
  learn_frames.py [--corpus FILE] [--out harness/triage/ranker/frames.yaml]
  learn_frames.py --tokens < lines     # each line's tokens (what the fixture checks)
  learn_frames.py --stats              # how many tune failures hold a frame, by stage
Stdlib only, so it runs under /usr/bin/python3.
"""
import argparse
import collections
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]

# The three expressions ranker_frames.cpp runs too (ECMAScript and Python read them alike).
PY_FRAME = re.compile(r'([^"\s]*\.py)", line \d+, in ([A-Za-z_<][\w<>]*)', re.A)
SOURCE_REF = re.compile(r"([\w./\\-]*\.(?:py|cpp|cc|cu|cuh|cxx|hpp|c|h)):\d+(?::(\w+)\])?",
                        re.A)
CXX_FRAME = re.compile(r"(?:#\d+ +0x[0-9a-fA-F]+ in |frame #\d+: |raised from )"
                       r"([A-Za-z_~][\w~]*(?:::[A-Za-z_~][\w~]*)*)", re.A)
LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# A line's first this many characters are read (a one-line log of megabytes costs no more).
LINE_CHARS = 2000
# Packages whose directory starts the module of a path outside site-packages (a source checkout).
ROOTS = {"deepspeed", "megatron", "colossalai", "torch", "transformers", "accelerate", "apex",
         "transformer_engine", "vllm", "peft", "trl", "lightning", "pytorch_lightning", "fairscale",
         "xformers", "flash_attn", "triton", "nemo", "horovod", "bitsandbytes", "datasets",
         "tensorrt_llm", "mmengine", "sglang", "torchtitan", "fairseq", "huggingface_hub"}
STDLIB = re.compile(r"python\d(\.\d+)?$", re.A)
MIN_DF = 2
PIECE = re.compile(r"[a-z]+$", re.A)  # a word of a name: letters only


def module_of(path):
    """A source path's module: `.../site-packages/deepspeed/runtime/engine.py` ->
    `deepspeed.runtime.engine`; a C/C++ file -> its name without the extension."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    if not parts:
        return ""
    if not parts[-1].endswith(".py"):
        return parts[-1].rsplit(".", 1)[0].translate(LOWER)
    start = len(parts) - 1
    for i in range(len(parts) - 1):
        if parts[i] in ("site-packages", "dist-packages") or STDLIB.match(parts[i]):
            start = i + 1
    if start == len(parts) - 1:
        for i in range(len(parts) - 1):
            if parts[i] in ROOTS:
                start = i
    mod = [p for p in parts[start:] if not p.endswith(".egg")]
    mod[-1] = mod[-1][:-3]
    if len(mod) > 1 and mod[-1] == "__init__":
        mod.pop()
    return ".".join(mod).translate(LOWER)


def frame_tokens(mod, func):
    """A frame's tokens: `func` and `mod:func` (`mod:` without a function); and for a module of
    three or more parts its package's two first parts, `deepspeed.inference.*`."""
    out = [func, f"{mod}:{func}"] if func and mod else [func] if func else [f"{mod}:"] if mod else []
    parts = mod.split(".")
    if len(parts) >= 3:
        out.append(".".join(parts[:2]) + ".*")
    for name in parts + [func]:  # the words of its names: `load_checkpoint` -> `~load`, `~checkpoint`
        out += ["~" + w for w in name.split("_") if len(w) >= 3 and PIECE.match(w)]
    return out


def line_tokens(line):
    """The distinct frame tokens of one line, sorted."""
    line = line[:LINE_CHARS]
    out = set()
    for m in PY_FRAME.finditer(line):
        out.update(frame_tokens(module_of(m.group(1)), m.group(2).translate(LOWER)))
    for m in SOURCE_REF.finditer(line):
        out.update(frame_tokens(module_of(m.group(1)), (m.group(2) or "").translate(LOWER)))
    for m in CXX_FRAME.finditer(line):
        names = [n.translate(LOWER) for n in m.group(1).split("::")]
        out.update(frame_tokens(".".join(names[:-1]), names[-1]))
    return sorted(out)


def issue_tokens(r):
    out = set()
    for line in r["error_lines"] + r["env_lines"]:
        out.update(line_tokens(line))
    return out


def is_failure(r):
    return r["stage"] != 0 and any(s != "none" for s in r["symptoms"])


def count(issues, min_df=MIN_DF):
    """(failures with a frame, stage -> such failures, token -> stage -> failures holding it)."""
    classes = collections.Counter()
    rows = collections.defaultdict(collections.Counter)
    for r in issues:
        if not is_failure(r):
            continue
        toks = issue_tokens(r)
        if not toks:
            continue
        classes[str(r["stage"])] += 1
        for t in toks:
            rows[t][str(r["stage"])] += 1
    rows = {t: c for t, c in rows.items() if sum(c.values()) >= min_df}
    return sum(classes.values()), classes, rows


def write_frames(issues, path):
    n, classes, rows = count(issues)
    q = json.dumps  # a token may hold ':', '<' or '.': always quoted
    lines = [
        "# GENERATED by harness/triage/learn_frames.py (through learn_ranker.py) from the TUNE",
        f"# split only; do not edit by hand. {n} labelled failures with a traceback frame; frame",
        f"# tokens in {MIN_DF} or more of them, per stage (docs/triage-history.md, Stop 53).",
        f"issues: {n}",
        "stages: {" + ", ".join(f'"{s}": {c}' for s, c in sorted(classes.items())) + "}",
        "frame_stages:",
    ]
    for t in sorted(rows):
        cells = ", ".join(f'"{s}": {c}' for s, c in sorted(rows[t].items()))
        lines.append(f"  {q(t)}: {{{cells}}}")
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n


def stats(issues):
    fail = [r for r in issues if is_failure(r) and r["error_lines"] + r["env_lines"]]
    by = collections.Counter(str(r["stage"]) for r in fail)
    have = collections.Counter(str(r["stage"]) for r in fail if issue_tokens(r))
    print(f"{sum(have.values())} of {len(fail)} tune failures with input lines hold a frame; "
          + ", ".join(f"stage {s} {have[s]} of {by[s]}" for s in sorted(by)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(HERE / "corpus" / "issues.jsonl"))
    ap.add_argument("--taxonomy", default=str(REPO / "scenarios" / "taxonomy.yaml"))
    ap.add_argument("--out", default=str(HERE / "ranker" / "frames.yaml"))
    ap.add_argument("--tokens", action="store_true", help="each stdin line's tokens")
    ap.add_argument("--stats", action="store_true", help="tune failures with frames")
    args = ap.parse_args()
    if args.tokens:
        for line in sys.stdin.read().splitlines():
            print(" ".join(line_tokens(line)))
        return 0
    sys.path.insert(0, str(HERE))
    from learn_ranker import tune_issues  # the split rule: test is never read
    issues = tune_issues(args.corpus, args.taxonomy)
    if args.stats:
        stats(issues)
        return 0
    n = write_frames(issues, args.out)
    print(f"{args.out}: frames of {n} labelled failures of the tune split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
