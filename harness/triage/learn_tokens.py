#!/usr/bin/python3
"""Learns weak token signatures for `faultline triage` from the corpus's TUNE split only.

A small ranker kept as data: for each word that appears in the input lines (error_lines and
env_lines) of at least --min-df tune issues, it estimates how much more often the issues holding it
carry each symptom (and root cause) than issues in general, and writes the words whose lift is
clear as signatures marked `fallback: true` into one YAML file of the signature folder. Triage
scores them only when the hand-written tables give no answer, needs two or more of them to agree,
and says the answer is weak; every answer still names the lines (and the words) it rests on.

The test split is never read: issues whose split is not "tune" are skipped before their lines are
looked at. --cv K measures the learned file by K-fold cross-validation inside the tune split (learn
on K-1 folds, run `faultline triage --eval` on the held-out fold, with and without the learned
file), which is how --beta and --min-df were chosen (the defaults).

The learned file is not shipped in harness/triage/signatures: measured once on the held-out test
split it tied the tables on top-1 and top-3 (docs/triage-history.md). To try it, copy the
signature folder, learn into the copy and point triage at it:
  cp -r harness/triage/signatures /tmp/sigs
  learn_tokens.py --out /tmp/sigs/zz_learned_tokens.yaml
  faultline triage issue.txt --signatures /tmp/sigs

Usage:
  learn_tokens.py --out FILE [--corpus FILE] [--beta B] [--min-df N]
  learn_tokens.py --cv 5 [--faultline build/harness/faultline]
Stdlib only, so it runs under /usr/bin/python3.
"""
import argparse
import collections
import hashlib
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
LEARNED = "zz_learned_tokens.yaml"  # sorted last; its ids all start with "learned-"
# Words too common in any log or report to say anything about a failure.
STOP = set("""
the and for with this that from not are was were but you your have has had all any can will would
should could when what which who how why where there here then than them they their its into out
use used using get got one two see also only just more most some such very may might must been
being does did done doing about after before over under other same each both while because
file line lib usr local home root python site packages dist self return true false none null
info warning warn error debug print import def class call run main args kwargs
""".split())


def split_of(issue_id):
    """The corpus's split rule (check_corpus.py): used only to refuse learning from test."""
    return "test" if int(hashlib.sha1(issue_id.encode("utf-8")).hexdigest(), 16) % 5 < 2 else "tune"


def fold_of(issue_id, folds):
    """A cross-validation fold inside the tune split, independent of the split rule's hash."""
    return int(hashlib.sha1(("fold:" + issue_id).encode("utf-8")).hexdigest(), 16) % folds


# A word as the tokenisers read it: a letter, then 2 to 39 letters, digits or '_' (a longer run is
# read in pieces of 40).
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,39}")
IDENT_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def kept(w):
    """Whether a lower-cased word counts: 3 characters or more, not a stop word, at most half
    digits."""
    return len(w) >= 3 and w not in STOP and sum(c.isdigit() for c in w) * 2 <= len(w)


def tokens(lines):
    return {w for line in lines for w in map(str.lower, WORD.findall(line)) if kept(w)}


def word_tokens(lines):
    """The word model's words (stop 70): tokens() and the parts of each compound identifier,
    split at underscores and at case steps (`ZeroInitContext`: zero, init, context;
    `_ddp_init_helper`: ddp, init, helper), each kept as tokens() keeps a word. The parts of
    the identifiers name what failed where the whole identifier is too rare to count: on 5-fold
    CV of the word model alone they gained top-1 +116 / -69 over whole words (1831 failures).
    ranker_words.cpp's vocabulary_words() reads the same words."""
    out = set()
    for line in lines:
        for w in WORD.findall(line):
            parts = [p.lower() for p in IDENT_PART.findall(w)]
            words = [w.lower()] + (parts if len(parts) >= 2 else [])
            out.update(x for x in words if kept(x))
    return out


# A file-system path or URL of two or more components (`/opt/conda/envs/x/lib/python3.10/...`,
# `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`, `https://github.com/...`): the words inside
# name where a program is installed, not what failed.
PATH = re.compile(r"(?:[A-Za-z][\w+.-]*:)?[\w.~+@-]*(?:[/\\]+[\w.~+@-]+){2,}[/\\]?")


def path_only_tokens(lines):
    """The words of `lines` (as tokens() reads them) that occur only inside paths or URLs."""
    inside = tokens(m.group(0) for ln in lines for m in PATH.finditer(ln))
    outside = tokens(PATH.sub(" ", ln) for ln in lines)
    return inside - outside


def root_cause_ids(taxonomy):
    """Root-cause name -> id (R4.6), read as check_corpus.py reads the catalogue."""
    ids = {}
    for line in pathlib.Path(taxonomy).read_text(encoding="utf-8").splitlines():
        m = re.match(r'\s*- \{id: "(R\d+\.\d+)", name: "([^"]+)"', line)
        if m:
            ids[m.group(2)] = m.group(1)
    return ids


def tune_issues(corpus, taxonomy):
    rc_ids = root_cause_ids(taxonomy)
    out = []
    for line in pathlib.Path(corpus).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["split"] != "tune" or split_of(rec["id"]) != "tune":
            continue  # the test split is never looked at
        rec["_tokens"] = tokens(rec["error_lines"] + rec["env_lines"])
        rec["_rc"] = rc_ids.get(rec["root_cause"])
        out.append(rec)
    return out


def label_mass(rec):
    """Symptom -> weight: the primary symptom 1, a secondary one 0.5; a non-failure nothing."""
    syms = [s for s in rec["symptoms"] if s != "none"]
    return {s: (1.0 if i == 0 else 0.5) for i, s in enumerate(syms)}


def weights_for(docs, labels_of, prior, beta, keep):
    """Label -> weight for one word: smoothed P(label | word) against the label's prior."""
    df = len(docs)
    mass = collections.Counter()
    for d in docs:
        for lab, w in labels_of(d).items():
            mass[lab] += w
    out = {}
    for lab, m in mass.items():
        p = (m + prior[lab]) / (df + 1.0)
        lift = p / prior[lab]
        if p >= 0.3 and lift >= 2.0:
            out[lab] = round(beta * p * min(math.log(lift), 3.0), 3)
    best = sorted(out.items(), key=lambda kv: -kv[1])[:keep]
    return dict(kv for kv in best if kv[1] >= 0.05)


def learn(issues, beta, min_df, max_tokens):
    """The kept words, each with its symptom and root-cause weights, strongest first."""
    sym_prior, rc_prior = collections.Counter(), collections.Counter()
    for r in issues:
        for s, w in label_mass(r).items():
            sym_prior[s] += w
        if r["_rc"]:
            rc_prior[r["_rc"]] += 1
    n = float(len(issues))
    sym_prior = {s: m / n for s, m in sym_prior.items()}
    rc_prior = {c: m / n for c, m in rc_prior.items()}
    by_word = collections.defaultdict(list)
    for r in issues:
        for w in r["_tokens"]:
            by_word[w].append(r)
    rows = []
    for w, docs in by_word.items():
        if len(docs) < min_df:
            continue
        syms = weights_for(docs, label_mass, sym_prior, beta, 2)
        if not syms:
            continue
        rcs = weights_for(docs, lambda d: {d["_rc"]: 1.0} if d["_rc"] else {}, rc_prior, beta, 1)
        rows.append((max(syms.values()) * math.log(1 + len(docs)), w, len(docs), syms, rcs))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return rows[:max_tokens]


def fmt_map(m):
    return "{" + ", ".join(f'"{k}": {v:g}' for k, v in sorted(m.items())) + "}"


def write_yaml(rows, path, n_issues, beta, min_df):
    lines = [
        "# GENERATED by harness/triage/learn_tokens.py from the TUNE split only; do not edit by hand.",
        f"# {len(rows)} words from {n_issues} tune issues (--beta {beta:g} --min-df {min_df}):",
        "# fallback: scored only when the hand-written tables give no answer, two or more must agree,",
        "# and triage calls such an answer weak; it names the lines that hold the words.",
        "signatures:",
    ]
    for _, w, df, syms, rcs in sorted(rows, key=lambda r: r[1]):
        lines.append(f"  - id: learned-{w}")
        lines.append(f'    needle: "{w}"')
        lines.append(f"    regex: '\\b{w}\\b'")
        lines.append("    icase: true")
        lines.append("    fallback: true")
        lines.append(f"    symptoms: {fmt_map(syms)}")
        if rcs:
            lines.append(f"    root_cause: {fmt_map(rcs)}")
        lines.append(f"    note: in {df} tune issues")
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


EVAL_ROW = re.compile(r"^\| (top-1 symptom|top-3 symptom|stage|root cause) \| [0-9.]+% \((\d+)/(\d+)\)")


def run_eval(faultline, corpus, sigdir):
    cmd = [faultline, "triage", "--eval", corpus, "--split", "tune", "--signatures", sigdir,
           "--no-drafts"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    got = {}
    for line in out.splitlines():
        m = EVAL_ROW.match(line)
        if m:
            got[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return got


def cross_validate(args):
    """K-fold CV inside the tune split: tables alone against tables + words learned elsewhere."""
    issues = tune_issues(args.corpus, args.taxonomy)
    sig = pathlib.Path(args.signatures)
    totals = {"tables": collections.Counter(), "learned": collections.Counter()}
    with tempfile.TemporaryDirectory() as tmp:
        tables = pathlib.Path(tmp, "tables")
        learned = pathlib.Path(tmp, "learned")
        for d in (tables, learned):
            d.mkdir()
            for f in sig.glob("*.yaml"):
                if f.name != LEARNED:
                    shutil.copy(f, d / f.name)
        for k in range(args.cv):
            train = [r for r in issues if fold_of(r["id"], args.cv) != k]
            held = [r for r in issues if fold_of(r["id"], args.cv) == k]
            fold_corpus = pathlib.Path(tmp, "fold.jsonl")
            fold_corpus.write_text("".join(
                json.dumps({k2: v for k2, v in r.items() if not k2.startswith("_")}) + "\n"
                for r in held), encoding="utf-8")
            rows = learn(train, args.beta, args.min_df, args.max_tokens)
            write_yaml(rows, learned / LEARNED, len(train), args.beta, args.min_df)
            for name, d in (("tables", tables), ("learned", learned)):
                for key, (n, total) in run_eval(args.faultline, str(fold_corpus), str(d)).items():
                    totals[name][key + " n"] += n
                    totals[name][key + " d"] += total
    for name in ("tables", "learned"):
        t = totals[name]
        cells = [f"{key} {100.0 * t[key + ' n'] / max(t[key + ' d'], 1):.1f}% "
                 f"({t[key + ' n']}/{t[key + ' d']})"
                 for key in ("top-1 symptom", "top-3 symptom", "stage", "root cause")]
        print(f"{args.cv}-fold CV on tune, {name:<8}: " + ", ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(HERE / "corpus" / "issues.jsonl"))
    ap.add_argument("--taxonomy", default=str(REPO / "scenarios" / "taxonomy.yaml"))
    ap.add_argument("--signatures", default=str(HERE / "signatures"))
    ap.add_argument("--out", help="the YAML file to write (name it " + LEARNED + ")")
    ap.add_argument("--beta", type=float, default=1.0, help="scale of the learned weights")
    ap.add_argument("--min-df", type=int, default=3, help="tune issues a word must appear in")
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--cv", type=int, default=0, help="K-fold cross-validation inside tune")
    ap.add_argument("--faultline", default=str(REPO / "build" / "harness" / "faultline"))
    args = ap.parse_args()
    if args.cv:
        cross_validate(args)
        return 0
    if not args.out:
        ap.error("--out FILE is required (or --cv K)")
    issues = tune_issues(args.corpus, args.taxonomy)
    rows = learn(issues, args.beta, args.min_df, args.max_tokens)
    write_yaml(rows, args.out, len(issues), args.beta, args.min_df)
    print(f"{args.out}: {len(rows)} words from {len(issues)} tune issues")
    return 0


if __name__ == "__main__":
    sys.exit(main())
