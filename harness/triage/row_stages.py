#!/usr/bin/python3
"""Which stages the tune issues a signature row matches are of (stop 59).

A row names one symptom, so one stage, but some texts are printed in several stages: a sentence
that says "hangs" is a set-up hang as often as a training one, an `NCCL WARN` is printed while
communicators are built and while they train. For each row of harness/triage/signatures/ this
prints how many tune issues with input lines it matches and how those issues' labelled stages
fall; `--mark` lists the rows whose own stage holds under --max-share of their matches (at least
--min-n of them): the rows a signature file marks `reinfer: true`, so that an answer resting on
them alone has its stage inferred from the words (cues.yaml reinfer_below;
docs/triage-history.md "Stop 59").

It matches as the binary does, nearly: the row's needle (case-insensitive) and then its regex on
each input line, error and environment lines alike (the binary reads a report as one text); an
`icase` row's regex is lower-cased as triage.cpp's lower_pattern does (an escaped letter keeps its
case) and runs on the lower-cased line. It does not mask paths first (the binary does for rows
that do not read paths), so a row can count an issue the binary would not. Only the tune split is
read.

Usage:
  row_stages.py [--corpus FILE] [--signatures DIR] [--min-n 5] [--max-share 0.65] [--mark]
Needs python3-yaml (the harness's tests install it).
"""
import argparse
import collections
import json
import pathlib
import re
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent


def lower_pattern(text):
    """An icase regex as the binary compiles it for lower-cased lines: every character lower-cased
    but the one after a backslash (`\\d`, `\\W`, `\\b` keep their meaning)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        out.append(text[i].lower())
        i += 1
    return "".join(out)


def load_rows(sig_dir):
    """(file, row) for each signature row whose regex Python can compile."""
    out = []
    for f in sorted(pathlib.Path(sig_dir).glob("*.yaml")):
        doc = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        for row in doc.get("signatures", []) or []:
            try:
                rx = row["regex"]
                row["_rx"] = re.compile(lower_pattern(rx) if row.get("icase") else rx)
            except re.error as e:
                print(f"row_stages.py: {f.name}: {row.get('id')}: regex not read by Python ({e})",
                      file=sys.stderr)
                continue
            out.append((f.name, row))
    return out


def matches(row, issue):
    lines = issue.get("error_lines", []) + issue.get("env_lines", [])
    icase = bool(row.get("icase"))
    needle = str(row["needle"]).lower()
    for line in lines:
        if needle not in line.lower():
            continue
        if row["_rx"].search(line.lower() if icase else line):
            return True
    return False


def row_stage(row):
    """The stage of the row's strongest symptom."""
    sym = max(row["symptoms"].items(), key=lambda kv: kv[1])[0]
    return int(str(sym).split(".")[0])


def tally(rows, issues):
    """{row id: (file, own stage, Counter of labelled stages)} for rows matching any issue."""
    out = {}
    for fname, row in rows:
        st = collections.Counter(d["stage"] for d in issues if matches(row, d))
        if st:
            out[row["id"]] = (fname, row_stage(row), st)
    return out


def marked(tallies, min_n, max_share):
    """Row ids whose own stage holds under max_share of at least min_n matched issues."""
    out = []
    for rid, (_, own, st) in tallies.items():
        n = sum(st.values())
        if n >= min_n and st[own] / n < max_share:
            out.append(rid)
    return sorted(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(HERE / "corpus" / "issues.jsonl"))
    ap.add_argument("--signatures", default=str(HERE / "signatures"))
    ap.add_argument("--min-n", type=int, default=5)
    ap.add_argument("--max-share", type=float, default=0.65)
    ap.add_argument("--mark", action="store_true", help="print only the rows to mark `reinfer`")
    a = ap.parse_args(argv)
    issues = []
    for n, line in enumerate(pathlib.Path(a.corpus).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"row_stages.py: {a.corpus}:{n}: not JSON ({e})")
        if d.get("split") == "tune" and (d.get("error_lines") or d.get("env_lines")):
            issues.append(d)
    tallies = tally(load_rows(a.signatures), issues)
    mark = marked(tallies, a.min_n, a.max_share)
    if a.mark:
        print("\n".join(mark))
        return 0
    print(f"{len(issues)} tune issues with input lines; a row's matches by labelled stage")
    print("| row | file | its stage | matched | its stage's share | by stage | mark |")
    print("| --- | --- | ---: | ---: | ---: | --- | --- |")
    order = sorted(tallies.items(), key=lambda kv: -sum(kv[1][2].values()))
    for rid, (fname, own, st) in order:
        n = sum(st.values())
        by = ", ".join(f"{k}: {v}" for k, v in sorted(st.items()))
        print(f"| {rid} | {fname} | {own} | {n} | {st[own] / n:.2f} | {by} | "
              f"{'yes' if rid in mark else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
