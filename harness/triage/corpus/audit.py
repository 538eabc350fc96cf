#!/usr/bin/python3
"""Compares the blind second labelling (audit.jsonl) with the corpus labels (issues.jsonl).

audit.jsonl holds one object per line with the keys id, stage, symptoms, root_cause,
fix_pattern and note, written by a second labeller who saw only each issue's stored lines
and the thread excerpt, never the first labels. This script first validates every audit
line (the id must be in the corpus; stage, symptoms, root cause and fix pattern must be
valid for the catalogue, using check_corpus.py's own checks), then prints how often the
two labellers agree, split by the corpus split, and lists every disagreement.

The agreement numbers are measurements, not assertions: the exit status is 0 when every
audit line is valid and 1 otherwise (each problem printed as FILE:LINE: message).

A lines-only labelling (--audit audit_lines.jsonl: labels written from each issue's stored
error and environment lines alone, the input triage sees) adds `confidence` and `mode`; its
symptoms are up to three ids in order of belief, and the table then also counts how often the
corpus primary is among them (the analogue of triage's top 3) and splits by confidence.
Every share is printed with its Wilson 95% interval.

With --eval-lines FILE (the output of `faultline triage --eval CORPUS --split S -v` over the
split that holds the audited issues), a lines-only labelling is also set beside triage on the
same issues: each one's top-1, top-3 and stage, and how many each gets right that the other
does not (stop 83).

Usage: audit.py [--audit FILE] [--corpus FILE] [--taxonomy FILE] [--eval-lines FILE] [--quiet]
"""
import argparse
import collections
import json
import math
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_corpus  # noqa: E402  (the corpus checker's validation is reused, not copied)

AUDIT_KEYS = ["id", "stage", "symptoms", "root_cause", "fix_pattern", "note"]
# A lines-only labelling (audit_lines.jsonl) adds how sure the labeller was and the mode; its
# symptoms are up to three ids in order of belief (the first in the labelled stage, the others
# any catalogue id), the human analogue of triage's top 3.
LINES_MODE = "lines-only"
LINES_KEYS = AUDIT_KEYS + ["confidence", "mode"]
CONFIDENCE = ["high", "medium", "low"]
MAX_BELIEFS = 3
SPLITS = ["tune", "test", "all"]
# A note that starts with this marks an issue whose thread the search tool did not return,
# so the second labeller saw only its stored lines (the first labeller saw an excerpt).
LINES_ONLY = "thread not found by search"
EVIDENCE = ["thread read", "lines only"]


def load_jsonl(path):
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rows.append((n, json.loads(line)))
    return rows


def lines_only(rec):
    return rec.get("mode") == LINES_MODE


def belief_problems(rec, taxonomy):
    """Problems of a lines-only record's extra keys and of its alternative symptoms."""
    problems = []
    if rec["confidence"] not in CONFIDENCE:
        problems.append(f"'confidence' {rec['confidence']!r} must be one of {CONFIDENCE}")
    syms = rec["symptoms"]
    if not isinstance(syms, list) or not 1 <= len(syms) <= MAX_BELIEFS:
        return problems + [f"'symptoms' must list 1 to {MAX_BELIEFS} ids in order of belief"]
    known = set().union(*taxonomy[0].values())
    for s in syms[1:]:
        if s not in known:
            problems.append(f"alternative symptom {s!r} is not a catalogue symptom id")
    if len(set(map(str, syms))) != len(syms):
        problems.append(f"'symptoms' {syms} repeats an id")
    return problems


def audit_problems(rec, corpus, taxonomy):
    """Problems of one audit line: its keys, its id, and its labels checked by
    check_corpus.check_record on the corpus line with the labels replaced. In a lines-only
    record only the first symptom must belong to the stage; the others are alternatives."""
    if not isinstance(rec, dict):
        return ["an audit line must be a JSON object"]
    keys = sorted(rec)
    expected = LINES_KEYS if "mode" in rec else AUDIT_KEYS
    if keys != sorted(expected):
        return [f"keys are {keys}; expected exactly {expected}"]
    if "mode" in rec and rec["mode"] != LINES_MODE:
        return [f"'mode' {rec['mode']!r} must be {LINES_MODE!r}"]
    if rec["id"] not in corpus:
        return [f"'id' {rec['id']!r} is not in the corpus"]
    note = rec["note"]
    problems = []
    if not isinstance(note, str) or not note.strip() or "\n" in note:
        problems.append("'note' must be one non-empty line")
    merged = dict(corpus[rec["id"]])
    merged.update({k: rec[k] for k in ("stage", "symptoms", "root_cause", "fix_pattern")})
    merged["fix"] = None if rec["fix_pattern"] is None else "(audit)"
    if lines_only(rec):
        problems += belief_problems(rec, taxonomy)
        if problems:
            return problems
        merged["symptoms"] = rec["symptoms"][:1]
    return problems + check_corpus.check_record(merged, taxonomy)


def kappa(pairs):
    """Cohen's kappa of a list of (label_a, label_b); None when chance agreement is 1."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(a == b for a, b in pairs) / n
    count_a = collections.Counter(a for a, _ in pairs)
    count_b = collections.Counter(b for _, b in pairs)
    expected = sum(count_a[c] * count_b[c] for c in count_a) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def labeller_right(a, c):
    """A second labeller's (top-1, top-3, stage) right by triage's own rules."""
    return (a["symptoms"][0] in c["symptoms"],
            any(s in c["symptoms"] for s in a["symptoms"][:MAX_BELIEFS]), a["stage"] == c["stage"])


def measures(pairs):
    """Agreement counts for a list of (audit record, corpus record)."""
    out = collections.OrderedDict()
    n = len(pairs)
    same_stage = [(a, c) for a, c in pairs if a["stage"] == c["stage"]]
    out["stage"] = (len(same_stage), n)
    out["primary symptom"] = (sum(a["symptoms"][0] == c["symptoms"][0] for a, c in pairs), n)
    out["either primary in other's list"] = (
        sum(a["symptoms"][0] in c["symptoms"] or c["symptoms"][0] in a["symptoms"]
            for a, c in pairs), n)
    # triage's own rules: top-1 is right when its first symptom is one of the corpus symptoms,
    # top-3 when one of its first three is.
    out["audit primary in corpus list (top-1 rule)"] = (
        sum(labeller_right(a, c)[0] for a, c in pairs), n)
    if all(lines_only(a) for a, _ in pairs):  # an empty column keeps these rows too (0/0)
        out["corpus primary in audit's first 3"] = (
            sum(c["symptoms"][0] in a["symptoms"][:MAX_BELIEFS] for a, c in pairs), n)
        out["any of audit's 3 in corpus list (top-3 rule)"] = (
            sum(labeller_right(a, c)[1] for a, c in pairs), n)
    out["root cause"] = (sum(a["root_cause"] == c["root_cause"] for a, c in pairs), n)
    out["root cause, same stage only"] = (
        sum(a["root_cause"] == c["root_cause"] for a, c in same_stage), len(same_stage))
    both_fix = [(a, c) for a, c in pairs if a["fix_pattern"] and c["fix_pattern"]]
    out["fix found or not, same answer"] = (
        sum((a["fix_pattern"] is None) == (c["fix_pattern"] is None) for a, c in pairs), n)
    out["fix pattern, where both set"] = (
        sum(a["fix_pattern"] == c["fix_pattern"] for a, c in both_fix), len(both_fix))
    out["kappa stage"] = kappa([(a["stage"], c["stage"]) for a, c in pairs])
    out["kappa primary symptom"] = kappa([(a["symptoms"][0], c["symptoms"][0]) for a, c in pairs])
    return out


def wilson(hit, n, z=1.96):
    """Wilson score interval (95% by default) of hit successes in n trials, as fractions."""
    if n == 0:
        return 0.0, 1.0
    p = hit / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return max(0.0, (centre - half) / denom), min(1.0, (centre + half) / denom)


def cell(value, interval=False):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.2f}"
    hit, n = value
    if not n:
        return "0/0"
    text = f"{hit}/{n} ({100 * hit / n:.0f}%)"
    if interval:
        lo, hi = wilson(hit, n)
        text += f" [{100 * lo:.0f}-{100 * hi:.0f}]"
    return text


def print_table(columns, interval=False):
    names = list(dict.fromkeys(name for m in columns.values() for name in m))  # every column's
    width = max(len(s) for s in names) + 2
    colw = 24 if interval else 14
    print("measure".ljust(width) + "".join(c.rjust(colw) for c in columns))
    for name in names:
        print(name.ljust(width)
              + "".join(cell(m.get(name), interval).rjust(colw) for m in columns.values()))


def evidence(rec):
    return EVIDENCE[1] if rec["note"].startswith(LINES_ONLY) else EVIDENCE[0]


def label(rec):
    fix = rec["fix_pattern"] or "-"
    return f"stage {rec['stage']} {','.join(rec['symptoms'])} | {rec['root_cause']} | {fix}"


def kind(a, c):
    """The kind of one disagreement, coarsest first; None when stage, primary symptom and
    root cause all agree."""
    if a["stage"] != c["stage"]:
        if a["stage"] == 0:
            return "stage: audit saw no failure, corpus has one"
        if c["stage"] == 0:
            return "stage: corpus has no failure, audit saw one"
        return "stage: both failures, different stages"
    if a["symptoms"][0] != c["symptoms"][0]:
        if lines_only(a) and c["symptoms"][0] in a["symptoms"]:
            return "primary symptom, same stage (corpus primary among audit's 3)"
        return "primary symptom, same stage"
    if a["root_cause"] != c["root_cause"]:
        return "root cause only"
    return None


def print_kinds(pairs):
    counts = collections.Counter(kind(a, c) for a, c in pairs)
    total = sum(n for k, n in counts.items() if k is not None)
    print(f"\nKinds of disagreement ({total} of {len(pairs)} differ in stage, primary or root cause):")
    for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        if k is not None:
            print(f"  {n:3d}  {k}")


def print_disagreements(pairs):
    print("\nDisagreements (audit first, corpus second; '*' marks the fields that differ):")
    for a, c in pairs:
        diff = [k for k in ("stage", "primary", "root_cause")
                if (a["symptoms"][0] != c["symptoms"][0] if k == "primary" else a[k] != c[k])]
        if not diff:
            continue
        sure = f" ({a['confidence']})" if lines_only(a) else ""
        print(f"{a['id']} [{c['split']}] *{','.join(diff)}{sure}")
        print(f"    audit : {label(a)}")
        print(f"    corpus: {label(c)}")


# One issue's line of `faultline triage --eval -v`: id, labelled stage, answered stage, verdict.
EVAL_LINE = re.compile(r"^  (\S+) +label \S+ +stage (\d) \S+ +\| got \S+ +stage (\d) \S+ +(ok|top3|MISS)\b")


def read_eval_lines(path):
    """id -> (top-1 right, top-3 right, stage right) from triage's verbose eval output."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = EVAL_LINE.match(line)
        if m:
            out[m.group(1)] = (m.group(4) == "ok", m.group(4) in ("ok", "top3"),
                               m.group(2) == m.group(3))
    return out


def paired(pairs, triage):
    """Per measure: (labeller right, triage right, both, labeller only, triage only, n)."""
    rows = collections.OrderedDict()
    for k, name in enumerate(["top-1 rule", "top-3 rule", "stage"]):
        h = [labeller_right(a, c)[k] for a, c in pairs]
        t = [triage[a["id"]][k] for a, _ in pairs]
        rows[name] = (sum(h), sum(t), sum(x and y for x, y in zip(h, t)),
                      sum(x and not y for x, y in zip(h, t)), sum(y and not x for x, y in zip(h, t)),
                      len(pairs))
    return rows


def print_paired(pairs, path):
    try:
        triage = read_eval_lines(path)
    except (OSError, UnicodeDecodeError) as e:
        print(f"{path}: cannot be read as triage's --eval -v output: {e}")
        return 1
    bare = [a["id"] for a, c in pairs if not (c.get("error_lines") or c.get("env_lines"))]
    pairs = [p for p in pairs if p[0]["id"] not in bare]  # the eval skips issues without lines
    missing = [a["id"] for a, _ in pairs if a["id"] not in triage]
    if missing:
        print(f"{path}: no eval line for {len(missing)} of the {len(pairs)} audited issues "
              f"(first: {missing[0]}); run `faultline triage --eval CORPUS --split S -v` over "
              "the split that holds them")
        return 1
    skipped = f"; {len(bare)} without input lines left out, as the eval leaves them" if bare else ""
    print(f"\nThe labeller and triage on the same {len(pairs)} issues ({path.name}{skipped}):\n")
    print("measure".ljust(12) + "".join(h.rjust(22) for h in
                                         ["labeller", "triage", "both", "labeller only",
                                          "triage only"]))
    for name, (h, t, both, h_only, t_only, n) in paired(pairs, triage).items():
        print(name.ljust(12) + cell((h, n), True).rjust(22) + cell((t, n), True).rjust(22)
              + "".join(str(x).rjust(22) for x in (both, h_only, t_only)))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit", type=pathlib.Path, default=HERE / "audit.jsonl")
    parser.add_argument("--corpus", type=pathlib.Path, default=HERE / "issues.jsonl")
    parser.add_argument("--taxonomy", type=pathlib.Path,
                        default=check_corpus.REPO / "scenarios" / "taxonomy.yaml")
    parser.add_argument("--eval-lines", type=pathlib.Path,
                        help="triage's `--eval -v` output: set it beside a lines-only labelling")
    parser.add_argument("--quiet", action="store_true", help="only validate; print problems")
    args = parser.parse_args(argv)

    taxonomy = check_corpus.load_taxonomy(args.taxonomy)
    corpus = {rec["id"]: rec for _, rec in load_jsonl(args.corpus)}
    audit, failed, seen = [], False, set()
    for n, rec in load_jsonl(args.audit):
        problems = audit_problems(rec, corpus, taxonomy)
        if isinstance(rec, dict) and rec.get("id") in seen:
            problems.append(f"'id' {rec['id']!r} appears twice")
        for p in problems:
            print(f"{args.audit.name}:{n}: {rec.get('id') if isinstance(rec, dict) else '?'}: {p}")
        failed = failed or bool(problems)
        if not problems:
            seen.add(rec["id"])
            audit.append(rec)
    if failed:
        return 1
    if args.quiet:
        return 0
    pairs = [(a, corpus[a["id"]]) for a in audit]
    by_split = {s: measures([p for p in pairs if s == "all" or p[1]["split"] == s]) for s in SPLITS}
    print(f"Second labelling: {len(pairs)} issues ({args.audit.name} against {args.corpus.name})\n")
    print_table(by_split, interval=True)
    print("\n[lo-hi]: Wilson 95% interval, in percent.")
    if all(lines_only(a) for a, _ in pairs):
        print("\nBy the labeller's confidence (labelled from the stored lines only):\n")
        print_table({f"{k} ({sum(a['confidence'] == k for a, _ in pairs)})":
                     measures([p for p in pairs if p[0]["confidence"] == k])
                     for k in CONFIDENCE if any(a["confidence"] == k for a, _ in pairs)},
                    interval=True)
        shown = {"lines show a failure": [p for p in pairs if p[0]["stage"] != 0],
                 "lines show none": [p for p in pairs if p[0]["stage"] == 0]}
        print("\nBy whether the labeller saw a failure in the lines (audit stage 0 = none):\n")
        print_table({f"{k} ({len(v)})": measures(v) for k, v in shown.items() if v},
                    interval=True)
    else:
        print(f"\nBy what the second labeller saw ('{LINES_ONLY}' notes = stored lines only):\n")
        print_table({e: measures([p for p in pairs if evidence(p[0]) == e]) for e in EVIDENCE},
                    interval=True)
    if args.eval_lines:
        if not all(lines_only(a) for a, _ in pairs):
            print(f"--eval-lines: {args.audit.name} is not a lines-only labelling (mode "
                  f"'{LINES_MODE}'); only such a labelling names three symptoms like triage")
            return 1
        if print_paired(pairs, args.eval_lines):
            return 1
    print_kinds(pairs)
    print_disagreements(pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
