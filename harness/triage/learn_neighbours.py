#!/usr/bin/python3
"""Writes the nearest-neighbour file of `faultline triage` from the corpus's TUNE split only.

Stop 53: a report is compared with every labelled tune issue; the nearest ones are shown to the
user as evidence ("similar labelled issues") and, where cues.yaml's knn_* settings are on, their
labels vote for the stage and the symptoms of a weak answer (ranker_neighbours.hpp).

The file (harness/triage/ranker/neighbours.jsonl) holds one JSON object a line: first a header
  {"format": "faultline-neighbours 1", "issues": N, "tokens": T}
then one line per tune issue that has input lines (failures and non-failures):
  {"id": ..., "url": ..., "summary": ..., "symptoms": ["4.11", "4.3"], "stage": 4,
   "root_cause": "R4.6", "tokens": "allreduce hang nccl ..."}
`tokens` are the issue's distinct words of its error_lines and env_lines as learn_tokens.py's
tokens() reads them (the C++ tokeniser of ranker_words.cpp agrees: a letter, then 2 to 39
letters, digits or '_', lower-cased; stop words and mostly-digit words are dropped here, and the
C++ side keeps only words the file holds), sorted and joined by one blank. No raw line is kept;
`summary` is the labeller's one-line summary of the issue (at most 140 characters), shown to the
user next to the id.
The document frequencies (in how many issues each word occurs) follow from the tokens and are
counted when the file is read, by this script and by the binary alike.

Similarity (the binary's and this script's, equal to 1e-9): the cosine of binary vectors weighted
by idf(w) = ln((N + 1) / (df(w) + 1)) + 1, over the words the file holds (a query word it does not
hold weighs nothing). With --bm25, Okapi BM25 with binary term frequency instead (k1 1.2, b 0.75;
idf ln(1 + (N - df + 0.5) / (df + 0.5))).

Usage:
  learn_neighbours.py [--out harness/triage/ranker/neighbours.jsonl]
  learn_neighbours.py --score FILE [--bm25] < text   # the nearest issues of a text, 12 digits
learn_ranker.py calls write_neighbours() next to priors.yaml and words.yaml, so each fold of its
--cv writes the file from that fold's training issues only. Stdlib only.
"""
import argparse
import collections
import json
import math
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from learn_tokens import split_of, tokens  # noqa: E402

FORMAT = "faultline-neighbours 1"
BM25_K1, BM25_B = 1.2, 0.75


def clip(text, n=140):
    """The labeller's one-line summary (not a line of the issue), cut at `n` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[:n - 3].rstrip() + "..."


def rows_of(issues):
    """The file's issue rows: tune issues with input lines, their labels and distinct tokens."""
    out = []
    for r in issues:
        if r["split"] != "tune" or split_of(r["id"]) != "tune":
            continue  # never the test split
        lines = r["error_lines"] + r["env_lines"]
        if not lines:
            continue
        out.append({"id": r["id"], "url": r.get("url", ""), "summary": clip(r.get("summary", "")),
                    "symptoms": list(r["symptoms"]),
                    "stage": int(r["stage"]), "root_cause": r.get("_rc") or "none",
                    "tokens": " ".join(sorted(tokens(lines)))})
    return out


def write_neighbours(issues, path):
    """Writes the file from `issues` (tune issues, each with `_rc` its root-cause id)."""
    rows = rows_of(issues)
    head = {"format": FORMAT, "issues": len(rows),
            "tokens": sum(len(r["tokens"].split()) for r in rows)}
    text = json.dumps(head) + "\n" + "".join(json.dumps(r) + "\n" for r in rows)
    pathlib.Path(path).write_text(text, encoding="utf-8")
    return len(rows)


def read_neighbours(path):
    """The issue rows of a file (the header checked)."""
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    if head.get("format") != FORMAT:
        raise ValueError(f"{path}:1: format: not '{FORMAT}'")
    rows = [json.loads(ln) for ln in lines[1:] if ln.strip()]
    for r in rows:
        r["_set"] = set(r["tokens"].split())
    return rows


def document_frequencies(rows):
    return collections.Counter(w for r in rows for w in r["_set"])


def query_tokens(text, max_bytes=65536):
    """The distinct words of a text's first `max_bytes` as the binary reads an input."""
    return tokens(text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore").split("\n"))


def similarities(rows, words, bm25=False):
    """(similarity, row) for each row sharing a word with `words`, best first (ties: file order)."""
    df = document_frequencies(rows)
    n = len(rows)
    q = {w for w in words if w in df}
    out = []
    if bm25:
        avg = sum(len(r["_set"]) for r in rows) / max(n, 1)
        for i, r in enumerate(rows):
            norm = BM25_K1 * (1 - BM25_B + BM25_B * len(r["_set"]) / avg)
            s = sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * (BM25_K1 + 1) / (1 + norm)
                    for w in q & r["_set"])
            if s > 0:
                out.append((s, i, r))
    else:
        idf = {w: math.log((n + 1) / (df[w] + 1)) + 1 for w in df}
        qn = math.sqrt(sum(idf[w] ** 2 for w in q))
        for i, r in enumerate(rows):
            shared = q & r["_set"]
            if not shared:
                continue
            dn = math.sqrt(sum(idf[w] ** 2 for w in r["_set"]))
            out.append((sum(idf[w] ** 2 for w in shared) / (qn * dn), i, r))
    out.sort(key=lambda t: (-t[0], t[1]))
    return [(s, r) for s, _, r in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(HERE / "corpus" / "issues.jsonl"))
    ap.add_argument("--taxonomy", default=str(REPO / "scenarios" / "taxonomy.yaml"))
    ap.add_argument("--out", default=str(HERE / "ranker" / "neighbours.jsonl"))
    ap.add_argument("--score", metavar="FILE", help="print the nearest issues of stdin's text")
    ap.add_argument("--bm25", action="store_true", help="--score: BM25 instead of the cosine")
    ap.add_argument("-k", type=int, default=5, help="--score: how many")
    args = ap.parse_args()
    if args.score:
        rows = read_neighbours(args.score)
        for s, r in similarities(rows, query_tokens(sys.stdin.read()), args.bm25)[:args.k]:
            print(f"{r['id']}\t{s:.12f}")
        return 0
    from learn_ranker import tune_issues  # the split rule: test is never read
    n = write_neighbours(tune_issues(args.corpus, args.taxonomy), args.out)
    print(f"{args.out}: {n} tune issues with input lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
