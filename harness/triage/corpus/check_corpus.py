#!/usr/bin/python3
"""Validates the triage corpus (issues.jsonl, and the dev split dev.jsonl) and prints its counts.

Every line is checked against the schema in README.md, the catalogue in scenarios/taxonomy.yaml
(symptom ids and root-cause names of the line's stage) and the split rule fixed before labelling.
The dev file (README.md, "The dev split") holds fresh issues the rule puts in tune, kept apart
for judging tuning changes: each of its lines must say `"split": "dev"`, hash to tune, and have an
id that issues.jsonl does not hold.
Stdlib only, so it runs under /usr/bin/python3 and in CI without a virtual environment.

Usage: check_corpus.py [--corpus FILE] [--dev FILE] [--taxonomy FILE] [--quiet]
Exit status 0 when every line is valid, 1 otherwise (each problem printed as FILE:LINE: message).
"""
import argparse
import collections
import hashlib
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]

KEYS = ["id", "url", "split", "framework", "error_lines", "env_lines", "summary", "symptoms",
        "root_cause", "stage", "fix_pattern", "fix"]
# The repositories the corpus draws on, and the framework each one is filed under.
REPOS = {"deepspeedai/DeepSpeed": "deepspeed", "microsoft/DeepSpeed": "deepspeed",
         "NVIDIA/Megatron-LM": "megatron", "hpcaitech/ColossalAI": "colossalai",
         "NVIDIA/nccl": "nccl", "pytorch/pytorch": "pytorch"}
MAX_ERROR_LINES = 12
MAX_ENV_LINES = 10
MAX_LINE_CHARS = 300
MAX_SUMMARY_CHARS = 250
MIN_TEST = 50
# Issues that show no distributed-failure signature (docs, feature requests, questions).
NONE = "none"


def split_of(issue_id):
    """The split rule, fixed before any issue was labelled: about 40% of ids land in test."""
    return "test" if int(hashlib.sha1(issue_id.encode("utf-8")).hexdigest(), 16) % 5 < 2 else "tune"


def load_taxonomy(path):
    """Symptom ids and root-cause names per stage, and fix-pattern ids, read without a YAML
    library: the catalogue writes every entry as a one-line flow mapping."""
    symptoms, causes, fixes, stage = {}, {}, set(), None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*- id: (\d+)\s*$", line)
        if m:
            stage = int(m.group(1))
            symptoms[stage], causes[stage] = set(), set()
            continue
        m = re.match(r'\s*- \{id: "(\d+\.\d+)", name: "([^"]+)"', line)
        if m and stage is not None:
            symptoms[stage].add(m.group(1))
            continue
        m = re.match(r'\s*- \{id: "R\d+\.\d+", name: "([^"]+)"', line)
        if m and stage is not None:
            causes[stage].add(m.group(1))
            continue
        m = re.match(r"\s*- \{id: (F\d+), name:", line)
        if m:
            fixes.add(m.group(1))
    if not symptoms or not fixes:
        raise SystemExit(f"{path}: no stages or fix patterns found; is this the catalogue?")
    return symptoms, causes, fixes


def check_lines(name, value, limit, problems):
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        problems.append(f"'{name}' must be a list of strings")
        return
    if len(value) > limit:
        problems.append(f"'{name}' has {len(value)} lines, at most {limit} allowed")
    for i, s in enumerate(value):
        if len(s) > MAX_LINE_CHARS:
            problems.append(f"'{name}'[{i}] has {len(s)} characters, at most {MAX_LINE_CHARS}")
        if "\n" in s:
            problems.append(f"'{name}'[{i}] contains a newline; store one log line per entry")


def check_split(rec, iid, dev):
    """The split rule: issues.jsonl's split is the hash's; a dev line is a tune-hash id marked dev."""
    if dev:
        if rec["split"] != "dev":
            return [f"'split' is {rec['split']!r} but every line of the dev file must say 'dev'"]
        if split_of(iid) != "tune":
            return [f"the split rule puts {iid} in test; a test issue belongs in issues.jsonl, "
                    "never in the dev file"]
        return []
    if rec["split"] != split_of(iid):
        return [f"'split' is {rec['split']!r} but the split rule gives {split_of(iid)!r}"]
    return []


def check_record(rec, taxonomy, dev=False):
    """Problems of one parsed line, as messages naming the key and what is allowed."""
    symptoms, causes, fixes = taxonomy
    if not isinstance(rec, dict):
        return ["a line must be a JSON object"]
    problems = []
    missing = [k for k in KEYS if k not in rec]
    extra = [k for k in rec if k not in KEYS]
    if missing:
        problems.append(f"missing keys {missing}")
    if extra:
        problems.append(f"unknown keys {extra}; allowed: {KEYS}")
    if missing:
        return problems
    iid = rec["id"]
    m = re.fullmatch(r"([\w.-]+/[\w.-]+)#(\d+)", iid) if isinstance(iid, str) else None
    if not m or m.group(1) not in REPOS:
        return problems + [f"'id' {iid!r} must be OWNER/REPO#N with a repository in {sorted(REPOS)}"]
    repo, num = m.groups()
    if rec["url"] not in (f"https://github.com/{repo}/issues/{num}",
                          f"https://github.com/{repo}/pull/{num}"):
        problems.append(f"'url' {rec['url']!r} does not point at {iid}")
    problems += check_split(rec, iid, dev)
    if rec["framework"] != REPOS[repo]:
        problems.append(f"'framework' {rec['framework']!r} must be {REPOS[repo]!r} for {repo}")
    check_lines("error_lines", rec["error_lines"], MAX_ERROR_LINES, problems)
    check_lines("env_lines", rec["env_lines"], MAX_ENV_LINES, problems)
    summary = rec["summary"]
    if not isinstance(summary, str) or not summary.strip() or "\n" in summary:
        problems.append("'summary' must be one non-empty line")
    elif len(summary) > MAX_SUMMARY_CHARS:
        problems.append(f"'summary' has {len(summary)} characters, at most {MAX_SUMMARY_CHARS}")
    stage, syms, cause = rec["stage"], rec["symptoms"], rec["root_cause"]
    if not isinstance(syms, list) or not syms or not all(isinstance(s, str) for s in syms):
        problems.append("'symptoms' must be a non-empty list of symptom ids")
        return problems
    if len(set(syms)) != len(syms):
        problems.append(f"'symptoms' {syms} repeats an id")
    if stage == 0 or syms == [NONE] or cause == NONE:
        # Not a distributed failure: all three markers agree and no fix is claimed.
        if not (stage == 0 and syms == [NONE] and cause == NONE):
            problems.append("a 'none' issue needs stage 0, symptoms ['none'] and root_cause 'none'")
        if rec["fix_pattern"] is not None or rec["fix"] is not None:
            problems.append("a 'none' issue has no fix_pattern or fix")
        return problems
    if not isinstance(stage, int) or isinstance(stage, bool) or stage not in symptoms:
        problems.append(f"'stage' {stage!r} must be one of {sorted(symptoms)} (or 0 for none)")
        return problems
    for s in syms:
        if s not in symptoms[stage]:
            problems.append(f"symptom {s!r} is not a stage-{stage} symptom; allowed: "
                            f"{sorted(symptoms[stage], key=lambda x: int(x.split('.')[1]))}")
    if cause not in causes[stage]:
        problems.append(f"'root_cause' {cause!r} is not a stage-{stage} root cause; allowed: "
                        f"{sorted(causes[stage])}")
    fp, fix = rec["fix_pattern"], rec["fix"]
    if fp is not None and fp not in fixes:
        problems.append(f"'fix_pattern' {fp!r} must be one of {sorted(fixes)} or null")
    if (fp is None) != (fix is None):
        problems.append("'fix_pattern' and 'fix' are both null (no fix in the thread) or both set")
    if fix is not None and (not isinstance(fix, str) or not fix.strip() or "\n" in fix):
        problems.append("'fix' must be one non-empty line or null")
    return problems


def count_table(records):
    """The counts the README reports, as plain text."""
    out = []
    by_split = collections.Counter(r["split"] for r in records)
    out.append(f"issues: {len(records)}  tune: {by_split['tune']}  test: {by_split['test']}")

    def table(title, key, order=None):
        tune = collections.Counter(key(r) for r in records if r["split"] == "tune")
        test = collections.Counter(key(r) for r in records if r["split"] == "test")
        names = order or sorted(set(tune) | set(test))
        out.append(f"{title:<12} {'tune':>5} {'test':>5} {'all':>5}")
        for n in names:
            out.append(f"{n!s:<12} {tune[n]:>5} {test[n]:>5} {tune[n] + test[n]:>5}")

    table("stage", lambda r: r["stage"])
    table("framework", lambda r: r["framework"])
    table("fix_pattern", lambda r: r["fix_pattern"] or "-")
    sym_tune = collections.Counter(s for r in records if r["split"] == "tune" for s in r["symptoms"])
    sym_test = collections.Counter(s for r in records if r["split"] == "test" for s in r["symptoms"])

    def sym_key(s):
        return (0, 0) if s == NONE else tuple(int(x) for x in s.split("."))

    out.append(f"{'symptom':<12} {'tune':>5} {'test':>5} {'all':>5}")
    for s in sorted(set(sym_tune) | set(sym_test), key=sym_key):
        out.append(f"{s:<12} {sym_tune[s]:>5} {sym_test[s]:>5} {sym_tune[s] + sym_test[s]:>5}")
    return "\n".join(out)


STAGE_NAMES = {0: "0 (none)", 1: "1 Package Build & Import", 2: "2 Communication Setup",
               3: "3 Data & Model Preparation", 4: "4 Training & Evaluation", 5: "5 Inference"}


def markdown_tables(records):
    """The README's counts tables (its "Counts" section), as markdown."""
    def table(title, keys, count):
        rows = [f"| {title} | tune | test | all |", "| --- | ---: | ---: | ---: |"]
        for k in keys:
            tune, test = count(k, "tune"), count(k, "test")
            if tune + test:
                rows.append(f"| {k} | {tune} | {test} | {tune + test} |")
        return rows

    def by(key):
        return lambda k, split: sum(key(r) == k and r["split"] == split for r in records)

    stage = table("stage", list(STAGE_NAMES.values()), by(lambda r: STAGE_NAMES[r["stage"]]))
    split = collections.Counter(r["split"] for r in records)
    stage.append(f"| **all** | **{split['tune']}** | **{split['test']}** | **{len(records)}** |")
    frameworks = [f for f, _ in collections.Counter(r["framework"] for r in records).most_common()]
    framework = table("framework", frameworks, by(lambda r: r["framework"]))
    sym_key = lambda s: (0, 0) if s == NONE else tuple(int(x) for x in s.split("."))
    syms = sorted({s for r in records for s in r["symptoms"]}, key=sym_key)
    symptom = table("symptom", syms, lambda k, split: sum(
        k in r["symptoms"] and r["split"] == split for r in records))
    fixes = collections.Counter(r["fix_pattern"] or "none" for r in records)
    fix_line = ("Fix patterns (all splits): " +
                ", ".join(f"{k} {fixes[k]}" for k in sorted(k for k in fixes if k != "none")) +
                f", none {fixes['none']}.")
    return "\n\n".join("\n".join(t) for t in (stage, framework, symptom)) + "\n\n" + fix_line


def check_file(path, taxonomy, seen, dev=False):
    """(problems, valid records) of one JSONL file; `seen` maps every id read so far to where."""
    errors, records = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            errors.append(f"{path}:{n}: empty line")
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"{path}:{n}: not JSON: {e}")
            continue
        problems = check_record(rec, taxonomy, dev)
        iid = rec.get("id") if isinstance(rec, dict) else None
        if isinstance(iid, str):
            if iid in seen:
                problems.append(f"duplicate id {iid} (first at {seen[iid]})")
            seen.setdefault(iid, f"{path.name}:{n}")
        errors += [f"{path}:{n}: {iid or '?'}: {p}" for p in problems]
        if not problems:
            records.append(rec)
    return errors, records


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(HERE / "issues.jsonl"))
    ap.add_argument("--dev", help="the dev split's file (default: dev.jsonl next to --corpus, "
                    "when it exists)")
    ap.add_argument("--taxonomy", default=str(REPO / "scenarios" / "taxonomy.yaml"))
    ap.add_argument("--quiet", action="store_true", help="print only problems")
    ap.add_argument("--markdown", action="store_true",
                    help="print the counts as the README's markdown tables")
    args = ap.parse_args()
    taxonomy = load_taxonomy(pathlib.Path(args.taxonomy))
    corpus = pathlib.Path(args.corpus)
    seen = {}
    errors, records = check_file(corpus, taxonomy, seen)
    tests = sum(r["split"] == "test" for r in records)
    if not errors and tests < MIN_TEST:
        errors.append(f"{corpus}: only {tests} issues in the test split, at least {MIN_TEST} needed")
    dev = pathlib.Path(args.dev) if args.dev else corpus.parent / "dev.jsonl"
    dev_records = []
    if args.dev or dev.exists():
        dev_errors, dev_records = check_file(dev, taxonomy, seen, dev=True)
        errors += dev_errors
    for e in errors:
        print(e, file=sys.stderr)
    if args.markdown:
        print(markdown_tables(records))
    elif not args.quiet:
        print(count_table(records))
        if dev_records:
            print(f"dev ({dev.name}): {len(dev_records)} issues")
    print(f"{'FAIL' if errors else 'OK'}: {len(records) + len(dev_records)} valid lines, "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
