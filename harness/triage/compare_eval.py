#!/usr/bin/python3
"""Compares two `faultline triage --eval ... -v` outputs issue by issue.

Usage: compare_eval.py BEFORE.txt AFTER.txt [--list]

For the issues both outputs hold, it prints the top-1 and top-3 counts before and after, how many
answers each change gained and lost, and the two-sided sign test's p over those changes (a
change that gains 5 and loses 1 moves 4 answers, p = 0.22: not yet evidence). `--list` names the
issues gained and lost. This is how the coordinator judges a branch on the dev split
(corpus/DEV.md): the aggregate leaves the dev split, its lines do not. Stdlib only.
"""
import argparse
import math
import re
import sys

# One `-v` line: "  OWNER/REPO#N   label 4.11  stage 4 R4.6  | got 4.11  stage 4 R4.6  ok"
LINE = re.compile(r"^\s+(\S+#\d+)\s+label (\S+)\s+stage (\d)\s.*\|\s*got (\S+)\s+stage (\d).*?"
                  r"\s(ok|top3|MISS)\b")


def outcomes(text):
    """{issue id: 'ok' | 'top3' | 'MISS'} of one `--eval -v` output."""
    got = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            got[m.group(1)] = m.group(6)
    return got


def sign_test(gained, lost):
    """Two-sided p of `gained` against `lost` under a fair coin (1.0 when nothing changed)."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def compare(before, after):
    """[(measure, n before, n after, gained ids, lost ids, issues)] over the shared issues."""
    ids = sorted(set(before) & set(after))
    rows = []
    for name, right in (("top-1", ("ok",)), ("top-3", ("ok", "top3"))):
        gained = [i for i in ids if after[i] in right and before[i] not in right]
        lost = [i for i in ids if before[i] in right and after[i] not in right]
        rows.append((name, sum(before[i] in right for i in ids),
                     sum(after[i] in right for i in ids), gained, lost, len(ids)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--list", action="store_true", help="name the issues gained and lost")
    args = ap.parse_args()
    before = outcomes(open(args.before, encoding="utf-8").read())
    after = outcomes(open(args.after, encoding="utf-8").read())
    if not before or not after:
        empty = args.before if not before else args.after
        print(f"{empty}: no `--eval -v` issue lines (run `faultline triage --eval CORPUS -v`)",
              file=sys.stderr)
        return 2
    for name, nb, na, gained, lost, n in compare(before, after):
        print(f"{name}: {nb} -> {na} of {n}; gained {len(gained)}, lost {len(lost)}, "
              f"sign test p = {sign_test(len(gained), len(lost)):.2f}")
        if args.list:
            print(f"  gained: {' '.join(gained) or '-'}\n  lost: {' '.join(lost) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
