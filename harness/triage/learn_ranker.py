#!/usr/bin/python3
"""Counts the ranker's priors for `faultline triage` from the corpus's TUNE split only.

The ranker (harness/triage/ranker.hpp) fills the candidates the signature tables leave thin: the
symptoms of the answer's stage, in the order of how often they are labelled together with the
top symptom and how often they occur in that stage; and the root cause that goes with the top
symptom. Those tallies are this script's output, harness/triage/ranker/priors.yaml:

  stage_symptoms       stage -> primary symptom -> tune issues
  co_occurrence        symptom -> symptom -> tune issues labelled with both (the diagonal: with it)
  symptom_root_causes  primary symptom -> root-cause id -> tune issues
  stage_root_causes    stage -> root-cause id -> tune issues
  stage_words          word -> stage -> weight: words of the input lines (error_lines and
                       env_lines, as learn_tokens.py reads them) that at least --min-df tune
                       failures hold and whose issues are of one stage at least twice as often
                       as failures in general, and that tell at least --min-gain (7) bits of
                       the stage (stop 49 round 5); the weight is ln(lift), at most 2. The ranker adds
                       them to cues.yaml's hand-written stage words when it infers a stage.

and, next to it, harness/triage/ranker/neighbours.jsonl (stop 53, learn_neighbours.py: each tune
issue's labels and distinct words) and harness/triage/ranker/words.yaml (stop 48), the learned word ranker's counts: for
each word of the input lines that at least 2 tune failures hold, how many of them carry each
symptom (a secondary label 0.5), are of each stage and have each root cause (stop 49), and each
symptom's, stage's and root cause's failures. The ranker smooths them into a multinomial naive
Bayes (cues.yaml nb_* settings). With --logistic (stop 52, learn_words.py), words.yaml also holds a
logistic regression's weights per kind of label over the same words, which the ranker then
scores instead. --cv counts both files again on each fold's training part.

The test split is never read: an issue whose split is not "tune" (by its field and by the split
rule) is skipped before anything else of it is looked at.

--cv K measures the ranker by K-fold cross-validation inside the tune split: for each fold, count
the priors on the other K-1 folds and run `faultline triage --eval` on the held-out fold with the
tables alone (--ranker none) and with the ranker. --thin also removes, in each fold, the table
signatures that match a held-out issue and no issue of the other folds: an approximation of issues
the tables were not written from (the held-out case), since the signatures were written from the
whole tune split.
--forward (stop 62) holds out, instead, each released dev split in turn (RELEASED: the corpus
lines each occupies) and counts the ranker on the tune issues of the lines above it only, so the
counted files (priors, words, frames, neighbours) know no issue collected after it; the rows and
hand-written words were written later and still know it (--thin drops the rows only it matches).
With --thin it had the dev splits' sign for 8 of 10 changes that moved their top-1, where thin CV
had it for 3 (docs/triage-history.md, "Stop 62").
--set KEY=VALUE overrides a setting of cues.yaml in the measured copy (to compare settings).

Usage:
  learn_ranker.py [--out harness/triage/ranker/priors.yaml]
  learn_ranker.py --cv 5 [--thin] [--check] [-v] [--set co_weight=0.5]
                  [--faultline build/harness/faultline]
  learn_ranker.py --cv-words 5   # stop 50: the word model alone, refit per fold, and in-sample;
                                 # and a learned non-failure score (measured, not shipped)
  learn_ranker.py --cv-words 5 --variant hier,lr --label-text none [--jobs 3]   # stop 52: other
                  # word models (they count input lines only)
  learn_ranker.py --logistic stages=3,symptoms=3,root_causes=3   # stop 52: words.yaml's regression
                  [--prune 0.05] [--weight-min-df 5] [--lr-cache DIR]   # stop 53: its cuts
  learn_ranker.py --cv 5 --thin --label-text none   # stop 61: words.yaml also counts each tune
                  # failure's summary and fix lines; on since stop 62, 'none' turns it off
  learn_ranker.py --forward --thin [-v] [--set k=v]   # stop 62: each released dev split
                  # held out in turn, counted on the tune lines above it
  learn_ranker.py --cv 5 --thin --nested nb_stage_weight=0.25,1 [--nested KEY=V1,V2]
                  [--nested-measure stage]   # stop 51: nested CV of settings
--cv also prints the ranker's stage confusions (labelled stage against the answer's; stop 51).
Stdlib only (--thin needs PyYAML, which Debian's python3 has), so it runs under /usr/bin/python3.
"""
import argparse
import collections
import itertools
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
sys.path.insert(0, str(HERE))
# The same words as the learned fallback, and the same split rule, folds and root-cause ids.
from learn_tokens import fold_of, path_only_tokens, root_cause_ids, split_of, tokens  # noqa: E402
# The word model (words.yaml) and its measurement (--cv-words, --variant; stop 52).
import learn_words  # noqa: E402
from learn_words import GRIDS, cv_words, id_key, word_model  # noqa: E402
# Stop 53: traceback frames per stage (frames.yaml), written next to priors.yaml (and per fold).
from learn_frames import write_frames  # noqa: E402
from learn_neighbours import write_neighbours  # noqa: E402  (stop 53: neighbours.jsonl)


def tune_issues(corpus, taxonomy):
    rc_ids = root_cause_ids(taxonomy)
    out = []
    for number, line in enumerate(pathlib.Path(corpus).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec["split"] != "tune" or split_of(rec["id"]) != "tune":
            continue  # the test split is never looked at
        rec["_rc"] = rc_ids.get(rec["root_cause"])
        rec["_line"] = number  # --forward: the collection round is known by its lines
        out.append(rec)
    return out


# Stop 49 (round 5): filters of the learned stage words, set by --min-gain and --path-share-max
# (and kept for every fold of --cv, which counts in this process).
# A stage word must tell at least this many bits of the stage summed over the failures it is
# counted on: n * (H(stage) - H(stage | the word present or not)). A word spread over every stage
# (`exit`, `found`, `please`, `github`) goes; thin CV +1 top-1, +2 top-3 and stage (6 to 8 alike).
MIN_GAIN = 7.0
# A word that, in more than this share of the failures holding it, occurs only inside paths or
# URLs is no stage word. 1.0: off (0.5 fixed four stage-1 answers and broke four; not kept).
PATH_SHARE_MAX = 1.0


def info_gain(stages, prior, n):
    """Bits the word's presence tells of the stage: H(stage) - H(stage | has word or not)."""
    def h(counts):
        tot = float(sum(counts.values()))
        return -sum(c / tot * math.log2(c / tot) for c in counts.values() if c > 0) if tot else 0.0
    df = sum(stages.values())
    rest = collections.Counter({st: prior[st] - stages.get(st, 0) for st in prior})
    return h(prior) - (df / n) * h(stages) - ((n - df) / n) * h(rest)


def stage_words(failures, min_df, max_words):
    """Word -> {stage: ln(lift)} for words that point at one stage (smoothed, lift >= 2). A word
    that tells less than MIN_GAIN bits of the stage, or that in more than PATH_SHARE_MAX of the
    failures holding it occurs only inside paths or URLs, is not a stage word."""
    prior = collections.Counter(str(r["stage"]) for r in failures)
    n = float(len(failures))
    by_word = collections.defaultdict(collections.Counter)
    in_paths = collections.Counter()
    for r in failures:
        lines = r["error_lines"] + r["env_lines"]
        for w in tokens(lines):
            by_word[w][str(r["stage"])] += 1
        in_paths.update(path_only_tokens(lines))
    rows = []
    for w, stages in by_word.items():
        df = sum(stages.values())
        if df < min_df or in_paths[w] > PATH_SHARE_MAX * df:
            continue
        if MIN_GAIN and df < n and info_gain(stages, prior, n) * n < MIN_GAIN:
            continue
        kept = {}
        for st, m in stages.items():
            p = (m + prior[st] / n) / (df + 1.0)
            lift = p / (prior[st] / n)
            if m >= 2 and lift >= 2.0:
                kept[st] = round(min(math.log(lift), 2.0), 2)
        if kept:
            rows.append((max(kept.values()) * math.log(1 + df), w, kept))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return {w: kept for _, w, kept in rows[:max_words]}


def count(issues, min_df=3, max_words=200):
    """The four tallies of priors.yaml, from labelled failures (stage 1-5) only."""
    stage_sym = collections.defaultdict(collections.Counter)
    co = collections.defaultdict(collections.Counter)
    sym_rc = collections.defaultdict(collections.Counter)
    stage_rc = collections.defaultdict(collections.Counter)
    n = 0
    for r in issues:
        syms = [s for s in r["symptoms"] if s != "none"]
        if r["stage"] == 0 or not syms:
            continue
        n += 1
        stage_sym[str(r["stage"])][syms[0]] += 1
        for a in syms:
            for b in syms:
                co[a][b] += 1
        if r["_rc"]:
            sym_rc[syms[0]][r["_rc"]] += 1
            stage_rc[str(r["stage"])][r["_rc"]] += 1
    failures = [r for r in issues if r["stage"] != 0]
    return n, {"stage_symptoms": stage_sym, "co_occurrence": co,
               "symptom_root_causes": sym_rc, "stage_root_causes": stage_rc,
               "stage_words": stage_words(failures, min_df, max_words)}


def write_tables(n, tables, path, what):
    lines = [
        "# GENERATED by harness/triage/learn_ranker.py from the TUNE split only; do not edit by hand.",
        f"# {n} labelled failures of the tune split. {what} (docs/triage.md, The ranker).",
        f"issues: {n}",
    ]
    for name, table in tables.items():
        lines.append(f"{name}:")
        for key in sorted(table, key=lambda k: (id_key(k), k)):
            cells = ", ".join(f'"{k}": {v}' for k, v in sorted(table[key].items(),
                                                              key=lambda kv: id_key(kv[0])))
            lines.append(f'  "{key}": {{{cells}}}')
    pathlib.Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n


def write_priors(issues, path):
    n, tables = count(issues)
    write_tables(n, tables, path, "Counts of issues")
    n, tables = word_model(issues)
    what = "The learned word ranker's counts: words in 2 or more of them"
    if learn_words.LABEL_TEXT:
        what += " (input lines, and their " + " and ".join(learn_words.LABEL_TEXT) + " lines)"
    if "logistic_bias" in tables:
        what += "; and a logistic regression's weights (L2: " + ", ".join(
            f"{k} {v:g}" for k, v in sorted(learn_words.LOGISTIC.items())) + ")"
    write_tables(n, tables, pathlib.Path(path).with_name("words.yaml"), what)
    write_frames(issues, pathlib.Path(path).with_name("frames.yaml"))
    # Stop 53: the nearest-neighbour file, from the same issues (each --cv fold: its training part).
    write_neighbours(issues, pathlib.Path(path).with_name("neighbours.jsonl"))
    return n


# `| top-1 symptom | 84.2% (165/196) [78-89] |`: the share, its counts, its Wilson interval.
EVAL_ROW = re.compile(r"^\| (.+?) \| [0-9.]+% \((\d+)/(\d+)\)(?: \[\d+-\d+\])? \|$")
MEASURES = ("top-1 symptom", "top-3 symptom", "stage", "root cause",
            "failures answered (not 'none')", "non-failures declined ('none')")


# An issue's line of `faultline triage --eval -v`: its labelled stage and the answer's stage.
ISSUE_LINE = re.compile(r"^  (\S+) +label \S+ +stage (\d) \S+ +\| got \S+ +stage (\d) ")


def stage_confusion(lines):
    """Stop 51: (labelled stage, answered stage) -> issues, for all answers and for the answers
    whose stage was inferred (`(weak: inferred stage)`), from the lines of --eval -v."""
    every, inferred = collections.Counter(), collections.Counter()
    for line in lines:
        m = ISSUE_LINE.match(line)
        if not m:
            continue
        cell = (int(m.group(2)), int(m.group(3)))
        every[cell] += 1
        inferred[cell] += "(weak: inferred stage)" in line
    return every, +inferred


def confusion_table(counts, title):
    """A markdown table of `counts`, labelled stage by row, answered stage by column (0: a
    non-failure's label, or the answer 'none'), and how many of each row are of another stage."""
    out = [f"{title}: labelled stage (rows) against the answer's stage (columns; 0: none)",
           "| labelled | " + " | ".join(str(s) for s in range(6)) + " | wrong |",
           "| --- |" + " ---: |" * 7]
    for a in range(6):
        row = [counts.get((a, b), 0) for b in range(6)]
        if sum(row):
            out.append(f"| {a} | " + " | ".join(str(c) for c in row)
                       + f" | {sum(row) - row[a]} of {sum(row)} |")
    return "\n".join(out)


def run_eval(faultline, corpus, sigdir, ranker, verbose=False, lines=None):
    """The measures of `faultline triage --eval` on `corpus`; with `lines`, its -v lines of each
    issue are appended to that list (and printed with `verbose`)."""
    want = verbose or lines is not None
    cmd = [faultline, "triage", "--eval", str(corpus), "--split", "tune",
           "--signatures", str(sigdir), "--ranker", str(ranker), "--no-drafts"]
    cmd += ["-v"] if want else []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if "| top-1 symptom |" not in out.stdout:
        sys.exit(f"learn_ranker.py: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    got = {}
    for line in out.stdout.splitlines():
        if want and line.startswith("  ") and " label " in line:
            if verbose:
                print(line.split(" | draft")[0])
            if lines is not None:
                lines.append(line)
        m = EVAL_ROW.match(line)
        if m:
            got[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    # A table this script cannot read must stop it: a CV over nothing would pass its --check.
    missing = [key for key in ("top-1 symptom", "top-3 symptom") if key not in got]
    if missing:
        sys.exit(f"learn_ranker.py: cannot read {', '.join(missing)} in the output of "
                 f"{' '.join(cmd)}:\n{out.stdout}")
    return got


def line_matches(sig, lines):
    needle = sig["needle"].lower()
    try:
        rx = re.compile(sig["regex"], re.I if sig.get("icase") else 0)
    except re.error:
        return True  # an ECMAScript-only regex: keep the signature
    return any(needle in ln.lower() and rx.search(ln) for ln in lines)


def thin_tables(src, dst, train, held):
    """Copies the signature folder without the signatures that match a held-out issue and no
    training issue: as if the held-out issues had not been read when the tables were written.
    A context row (`context_for`) loses the ids of dropped rows, and goes when none is left: the
    loader refuses a context row that names a row it does not have."""
    import yaml  # only --thin needs it
    texts = [r["error_lines"] + r["env_lines"] for r in train]
    held_texts = [r["error_lines"] + r["env_lines"] for r in held]

    def keep(sig):
        return (any(line_matches(sig, t) for t in texts)
                or not any(line_matches(sig, t) for t in held_texts))
    docs = {}
    gone = set()
    for f in sorted(pathlib.Path(src).glob("*.yaml")):
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        sigs = doc.get("signatures") or []
        kept = [s for s in sigs if keep(s)]
        gone |= {s.get("id") for s in sigs if s not in kept}
        docs[f.name] = (doc, sigs, kept)
    for doc, sigs, kept in docs.values():
        for s in kept:
            if s.get("context_for"):
                s["context_for"] = [i for i in s["context_for"] if i not in gone]
        if sigs:
            doc["signatures"] = [s for s in kept if "context_for" not in s or s["context_for"]]
    dropped = 0
    for name, (doc, sigs, _) in docs.items():
        dropped += len(sigs) - len(doc.get("signatures") or []) if sigs else 0
        pathlib.Path(dst, name).write_text(yaml.safe_dump(doc, sort_keys=False, width=1000),
                                           encoding="utf-8")
    return dropped


def ranker_copy(dst, train, overrides):
    """A ranker folder with priors counted on `train` and cues.yaml's settings overridden."""
    dst.mkdir(parents=True, exist_ok=True)
    cues = (HERE / "ranker" / "cues.yaml").read_text(encoding="utf-8")
    for key, val in overrides:
        cues, n = re.subn(rf"^(  {re.escape(key)}:) *\S+", rf"\g<1> {val}", cues, flags=re.M)
        if n != 1:
            sys.exit(f"learn_ranker.py: --set {key}: not a setting of cues.yaml")
    (dst / "cues.yaml").write_text(cues, encoding="utf-8")
    write_priors(train, dst / "priors.yaml")


# Stop 62: the released dev splits, by their lines of corpus/issues.jsonl (corpus/DEV.md and the
# corpus README say when each was released): name, first line, last line, and the first line
# its training part may not reach. Each split was collected after every line above that bound, and
# no row, word or setting was fitted on it while it was a dev split. Stop 54's second round (lines
# 2599-2819, tune) was collected after stop 54's dev split, so that split trains on lines below 2599.
RELEASED = (("stop 50", 1022, 1232, 1022), ("stop 51", 1373, 1591, 1373),
            ("stop 52", 1771, 2017, 1771), ("stop 53", 2192, 2432, 2192),
            ("stop 54", 2967, 3223, 2599), ("stop 55", 3340, 3505, 3340))


def folds(args, issues):
    """(name, training issues, held-out issues) of --cv K, or of --forward: each released dev
    split held out in turn, the ranker counted on the tune issues of the lines above it only."""
    if not args.forward:
        return [(f"fold {k}", [r for r in issues if fold_of(r["id"], args.cv) != k],
                 [r for r in issues if fold_of(r["id"], args.cv) == k]) for k in range(args.cv)]
    return [(name, [r for r in issues if r["_line"] < below],
             [r for r in issues if first <= r["_line"] <= last])
            for name, first, last, below in args.released]


def released_lines(text):
    """--released FIRST-LAST,...: the held-out rounds of --forward, each a range of corpus lines
    trained on the lines above it, in increasing order and not overlapping."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)-(\d+)", part.strip())
        if not m or int(m.group(1)) > int(m.group(2)) or int(m.group(1)) < 2:
            raise ValueError(f"'{part}' is not FIRST-LAST with 2 <= FIRST <= LAST")
        first, last = int(m.group(1)), int(m.group(2))
        if out and first <= out[-1][2]:
            raise ValueError(f"'{part}' does not start after the range before it")
        out.append((f"lines {first}-{last}", first, last, first))
    return out


def cross_validate(args):
    """K-fold CV inside the tune split (or --forward: the released dev splits in the order they
    were collected): the tables alone against the tables with the ranker."""
    issues = tune_issues(args.corpus, args.taxonomy)
    overrides = [kv.split("=", 1) for kv in args.set]
    totals = {"tables": collections.Counter(), "ranker": collections.Counter()}
    issue_lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (fold_name, train, held) in enumerate(folds(args, issues)):
            if not held:
                sys.exit(f"learn_ranker.py: {fold_name}: no tune issue to hold out there")
            fold = pathlib.Path(tmp, f"fold{k}")
            fold.mkdir()
            corpus = fold / "fold.jsonl"
            corpus.write_text("".join(
                json.dumps({k2: v for k2, v in r.items() if not k2.startswith("_")}) + "\n"
                for r in held), encoding="utf-8")
            sigs = pathlib.Path(args.signatures)
            dropped = ""
            if args.thin:
                sigs = fold / "signatures"
                sigs.mkdir()
                dropped = f", {thin_tables(args.signatures, sigs, train, held)} signatures dropped"
            print(f"{fold_name}: {len(held)} held-out issues, {len(train)} training issues"
                  + dropped)
            ranker_copy(fold / "ranker", train, overrides)
            for name, ranker in (("tables", "none"), ("ranker", fold / "ranker")):
                shown = args.verbose and name == "ranker"
                got = run_eval(args.faultline, corpus, sigs, ranker, shown,
                               issue_lines if name == "ranker" else None)
                for key, (n, d) in got.items():
                    totals[name][key + " n"] += n
                    totals[name][key + " d"] += d
    label = (f"forward CV over {len(args.released)} released dev splits" if args.forward else
             f"{args.cv}-fold CV on tune") + (" (thin tables)" if args.thin else "")
    for name in ("tables", "ranker"):
        t = totals[name]
        cells = [f"{key} {100.0 * t[key + ' n'] / max(t[key + ' d'], 1):.1f}% "
                 f"({t[key + ' n']}/{t[key + ' d']})" for key in MEASURES]
        print(f"{label}, {name}: " + ", ".join(cells))
    every, inferred = stage_confusion(issue_lines)
    print(confusion_table(every, f"{label}, ranker, every answer"))
    print(confusion_table(inferred, f"{label}, ranker, answers of an inferred stage"))
    worse = [key for key in ("top-1 symptom", "top-3 symptom")
             if totals["ranker"][key + " n"] < totals["tables"][key + " n"]]
    if args.check and worse:
        print("learn_ranker.py: the ranker loses to the tables alone on " + " and ".join(worse))
        return 1
    return 0


def eval_configs(fold, train, held, args, configs):
    """Counts the ranker on `train` once per setting of `configs` (each a --set list) and runs
    `triage --eval` on `held` with each: config index -> measure -> (right, of)."""
    fold.mkdir(parents=True)
    corpus = fold / "fold.jsonl"
    corpus.write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("_")})
                              + "\n" for r in held), encoding="utf-8")
    sigs = pathlib.Path(args.signatures)
    if args.thin:
        sigs = fold / "signatures"
        sigs.mkdir()
        thin_tables(args.signatures, sigs, train, held)
    out = {}
    for i, overrides in enumerate(configs):
        ranker_copy(fold / f"ranker{i}", train, overrides)
        out[i] = run_eval(args.faultline, corpus, sigs, fold / f"ranker{i}")
    return out


def nested_cv(args):
    """Stop 51: nested K-fold CV of cues.yaml settings. --nested KEY=V1,V2 (repeatable: every
    combination) gives the candidates; for each outer fold, the candidate with the most right
    --nested-measure answers (then top-1) on the inner CV of the other folds (counted on the
    folds but that inner one and the outer one) is scored on the outer fold, counted on all others.
    The nested total is what choosing the setting by CV is worth on issues the choice never saw."""
    issues = tune_issues(args.corpus, args.taxonomy)
    grid = [[(kv.split("=", 1)[0], v) for v in kv.split("=", 1)[1].split(",")] for kv in args.nested]
    base = [kv.split("=", 1) for kv in args.set]  # --set holds in every candidate
    configs = [base + list(c) for c in itertools.product(*grid)]
    name = [" ".join(f"{k}={v}" for k, v in c) for c in itertools.product(*grid)]
    if args.cv < 3:
        print(f"note: with --cv {args.cv} the inner folds train on no issue (their priors are "
              "empty); use 3 or more folds for a real choice", file=sys.stderr)
    fold = {r["id"]: fold_of(r["id"], args.cv) for r in issues}
    key = (args.nested_measure, "top-1 symptom")
    plain, nested = collections.Counter(), collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.cv):
            inner = collections.Counter()
            for j in range(args.cv):
                if j == k:
                    continue
                got = eval_configs(pathlib.Path(tmp, f"o{k}i{j}"),
                                   [r for r in issues if fold[r["id"]] not in (j, k)],
                                   [r for r in issues if fold[r["id"]] == j], args, configs)
                for i, g in got.items():
                    inner[i] += g[key[0]][0] * 10000 + g[key[1]][0]
            best = max(range(len(configs)), key=lambda i: (inner[i], -i))
            got = eval_configs(pathlib.Path(tmp, f"o{k}"), [r for r in issues if fold[r["id"]] != k],
                               [r for r in issues if fold[r["id"]] == k], args, configs)
            for i, g in got.items():
                for m, (n, d) in g.items():
                    plain[(i, m)] += n
                    plain[(i, m, "of")] += d
            for m, (n, d) in got[best].items():
                nested[m] += n
                nested[(m, "of")] += d
            print(f"outer fold {k}: inner CV chose {name[best]}: {key[0]} "
                  f"{got[best][key[0]][0]} of {got[best][key[0]][1]} (first candidate "
                  f"{got[0][key[0]][0]})")
    label = f"{args.cv}-fold CV on tune{' (thin tables)' if args.thin else ''}"
    for m in MEASURES[:4]:
        cells = [f"{name[i]} {plain[(i, m)]}" for i in range(len(configs))]
        print(f"{label}, {m}: " + ", ".join(cells) + f"; nested {nested[m]} of {nested[(m, 'of')]}")
    return 0


def main():
    global MIN_GAIN, PATH_SHARE_MAX
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(HERE / "corpus" / "issues.jsonl"))
    ap.add_argument("--taxonomy", default=str(REPO / "scenarios" / "taxonomy.yaml"))
    ap.add_argument("--signatures", default=str(HERE / "signatures"))
    ap.add_argument("--out", default=str(HERE / "ranker" / "priors.yaml"))
    ap.add_argument("--cv", type=int, default=0, help="K-fold cross-validation inside tune")
    ap.add_argument("--forward", action="store_true",
                    help="cross-validate by holding out each released dev split in turn, the "
                         "ranker counted on the tune lines above it (stop 62; instead of --cv K)")
    ap.add_argument("--released", default=None, metavar="FIRST-LAST,...",
                    help="--forward: the corpus lines of each held-out round (default: the six "
                         "released dev splits of stops 50-55)")
    ap.add_argument("--thin", action="store_true", help="--cv: drop signatures no training issue matches")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="--cv: override a setting of cues.yaml")
    ap.add_argument("--check", action="store_true",
                    help="--cv: exit 1 when the ranker's top-1 or top-3 is below the tables'")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="--cv: the ranker's line per held-out issue")
    ap.add_argument("--faultline", default=str(REPO / "build" / "harness" / "faultline"))
    ap.add_argument("--min-gain", type=float, default=MIN_GAIN,
                    help="bits of the stage a learned stage word must tell (0: off)")
    ap.add_argument("--path-share-max", type=float, default=PATH_SHARE_MAX,
                    help="a stage word may occur only in paths in at most this share (1: off)")
    ap.add_argument("--nested", action="append", default=[], metavar="KEY=V1,V2",
                    help="nested CV (--cv K folds) of the settings' combinations")
    ap.add_argument("--nested-measure", default="top-3 symptom", choices=MEASURES[:4],
                    help="--nested: the measure the inner CV chooses by (then top-1)")
    ap.add_argument("--cv-words", type=int, default=0, metavar="K",
                    help="K-fold CV of the learned word model alone, next to its in-sample score")
    ap.add_argument("--nb-alpha", type=float, default=1.0, help="--cv-words: the smoothing")
    ap.add_argument("--variant", default="", metavar="V1,V2",
                    help="--cv-words: measure these word models against the shipped one "
                         "(learn_words.py: " + ", ".join(GRIDS) + ")")
    ap.add_argument("--jobs", type=int, default=1, help="--cv-words --variant: outer folds at once")
    ap.add_argument("--label-text", default=",".join(learn_words.LABEL_TEXT) or "none",
                    metavar="FIELD,...|none",
                    help="words.yaml also counts the words of these label fields of each tune "
                         "failure (stop 61; on since stop 62; default: %(default)s)")
    ap.add_argument("--logistic", default=None, metavar="KIND=L2,...",
                    help="words.yaml's logistic regression: stages=1,symptoms=2,root_causes=1 "
                         "(the L2 penalty per kind; 'none': the naive Bayes alone); with --cv too")
    ap.add_argument("--prune", type=float, default=learn_words.PRUNE, metavar="W",
                    help="--logistic: leave weights under W out of words.yaml (stop 53)")
    ap.add_argument("--weight-min-df", type=int, default=learn_words.WEIGHT_MIN_DF, metavar="N",
                    help="--logistic: only words of N or more failures keep weights (stop 53)")
    ap.add_argument("--lr-cache", default=None, metavar="DIR",
                    help="--logistic: keep fitted regressions in DIR and reuse them (stop 53)")
    args = ap.parse_args()
    MIN_GAIN, PATH_SHARE_MAX = args.min_gain, args.path_share_max
    if args.released is not None and not args.forward:
        ap.error("--released: only with --forward")
    if args.forward and args.cv:
        ap.error("--forward: its rounds are the released splits; leave out --cv K")
    try:
        args.released = list(RELEASED) if args.released is None else released_lines(args.released)
    except ValueError as e:
        ap.error(f"--released: {e}")
    if args.forward and (args.nested or args.cv_words):
        ap.error("--forward: not with --nested or --cv-words (their folds are --cv K's)")
    learn_words.JOBS = args.jobs
    fields = () if args.label_text == "none" else tuple(args.label_text.split(","))
    if set(fields) - {"summary", "fix"} or len(set(fields)) != len(fields):
        ap.error(f"--label-text '{args.label_text}': use summary, fix or summary,fix (or none)")
    if fields and args.variant:
        ap.error("--variant: its word models count input lines only; add --label-text none")
    learn_words.LABEL_TEXT = fields
    learn_words.PRUNE, learn_words.WEIGHT_MIN_DF = args.prune, args.weight_min_df
    learn_words.LR_CACHE = args.lr_cache
    if args.logistic is not None:
        try:
            learn_words.LOGISTIC = {k: float(v) for k, v in (
                kv.split("=") for kv in args.logistic.split(",") if args.logistic != "none")}
        except ValueError:
            ap.error(f"--logistic {args.logistic}: not KIND=L2,... nor none")
        if set(learn_words.LOGISTIC) - {"stages", "symptoms", "root_causes"}:
            ap.error(f"--logistic {args.logistic}: kinds are stages, symptoms, root_causes")
    if args.cv_words:
        return cv_words(args, tune_issues(args.corpus, args.taxonomy))
    for kv in args.nested + args.set:
        key, _, values = kv.partition("=")
        if not key or not values or "" in values.split(","):
            ap.error(f"'{kv}' is not KEY=VALUE (--nested: KEY=V1,V2,...; no empty value)")
    if args.nested:
        return nested_cv(args) if args.cv else ap.error("--nested needs --cv K")
    if args.cv or args.forward:
        return cross_validate(args)
    n = write_priors(tune_issues(args.corpus, args.taxonomy), args.out)
    print(f"{args.out}: priors of {n} labelled failures of the tune split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
