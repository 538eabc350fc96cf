#!/usr/bin/env python3
"""Checks for tests/harness/merge_test.sh: a merged suite directory's JUnit (xml.etree), metrics
(prometheus_client's text parser), summary and report, and the edits that make bad shards.

  merge_check.py complete MERGED EXIT OUTPUT      the three shards merged
  merge_check.py partial MERGED EXIT OUTPUT FIRST COPY   shard 1 twice, shard 2 absent
  merge_check.py metrics FILE RUNS MISSING        one metrics file
  merge_check.py edit SUITE_DIR suite|shard|planned-drop VALUE
"""
import json
import sys
import xml.etree.ElementTree as ET

from prometheus_client.parser import text_string_to_metric_families

CASES = {
    "world-size-mismatch-s7",
    "world-size-mismatch-fix-s7",
    "different-prompts-on-tp-ranks-s7",
    "different-prompts-on-tp-ranks-fix-s7",
    "offload-disk-full-s7",
    "offload-disk-full-fix-s7",
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def shard_of(case_id, count):
    """FNV-1a 64 of the id modulo count, as harness/suite/select.cpp splits cases."""
    h = 0xCBF29CE484222325
    for b in case_id.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % count + 1


def case_id(name):
    """'different-prompts-on-tp-ranks [fix] seed 7' -> 'different-prompts-on-tp-ranks-fix-s7'."""
    scenario, _, seed = name.rpartition(" seed ")
    fix = scenario.endswith(" [fix]")
    return scenario.removesuffix(" [fix]") + ("-fix" if fix else "") + "-s" + seed


def check_junit(path, present, missing):
    """Every case once; testsuites and testsuite counts equal the elements; shards named."""
    root = ET.parse(path).getroot()
    expect(root.tag == "testsuites", f"{path}: root is {root.tag}")
    suites = root.findall("testsuite")
    expect(len(suites) == 1, f"{path}: {len(suites)} testsuite elements")
    cases = suites[0].findall("testcase")
    ids = [case_id(c.get("name")) for c in cases]
    expect(len(ids) == len(set(ids)), f"{path}: a case twice: {sorted(ids)}")
    expect(set(ids) == present | missing, f"{path}: cases {sorted(ids)}")
    kinds = {"failure": 0, "error": 0, "skipped": 0}
    for c, cid in zip(cases, ids):
        props = {p.get("name"): p.get("value") for p in c.iter("property")}
        expect(props.get("shard") == f"{shard_of(cid, 3)}/3", f"{cid}: shard {props.get('shard')}")
        if cid in present:
            expect(props.get("shard_dir", "").endswith("-smoke"), f"{cid}: {props}")
        for k in kinds:
            kinds[k] += len(c.findall(k))
        errors = c.findall("error")
        expect((cid in missing) == any(e.get("type") == "missing" for e in errors),
               f"{cid}: missing error element wrong")
    for el in (root, suites[0]):
        expect(int(el.get("tests")) == len(cases), f"{path}: tests={el.get('tests')}")
        expect(int(el.get("failures")) == kinds["failure"], f"{path}: failures")
        expect(int(el.get("errors")) == kinds["error"], f"{path}: errors")
        expect(int(el.get("skipped")) == kinds["skipped"], f"{path}: skipped")
    return kinds


def check_metrics(path, runs, missing):
    """Parsed by prometheus_client; no (name, labels) twice; the runs and missing gauges."""
    text = open(path).read()
    seen = set()
    values = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            expect(key not in seen, f"{path}: series twice: {key}")
            seen.add(key)
            values[key] = s.value
    total = sum(v for (n, l), v in values.items()
                if n == "faultline_suite_runs" and dict(l)["outcome"] != "missing")
    expect(total == runs, f"{path}: faultline_suite_runs adds up to {total}, not {runs}")
    got = values.get(("faultline_suite_missing_cases", (("suite", "smoke"),)))
    expect(got == missing, f"{path}: faultline_suite_missing_cases {got}, not {missing}")
    print(f"{path}: {len(seen)} series, none twice")


def check_exit(summary, rc, missing):
    failed = summary["failed"] > 0 or missing > 0
    expect(int(rc) == (1 if failed else 0), f"merge exited {rc} (failed {summary['failed']})")


def complete(merged, rc, output):
    s = json.load(open(f"{merged}/summary.json"))
    expect(s["suite"] == "smoke" and s["runs"] == 6, f"summary: {s['suite']} {s['runs']}")
    expect({c["id"] for c in s["cases"]} == CASES, f"summary cases {[c['id'] for c in s['cases']]}")
    expect(all(c["shard"] == f"{shard_of(c['id'], 3)}/3" for c in s["cases"]), "case shards")
    m = s["merge"]
    expect(len(m["shards"]) == 3 and m["planned"] == 6, f"merge: {m}")
    expect(m["duplicates"] == [] and m["missing"] == [] and m["absent_shards"] == [], f"{m}")
    for c in s["cases"]:  # run directories stay in the shards' directories, and exist there
        expect(c["run_dir"].startswith(c["shard_dir"] + "/runs/"), f"{c['id']}: {c['run_dir']}")
    check_exit(s, rc, 0)
    check_junit(f"{merged}/junit.xml", CASES, set())
    check_metrics(f"{merged}/metrics.prom", 6, 0)
    html = open(f"{merged}/report.html").read()
    expect('id="shards"' in html and "id=\"missing\"" not in html, "report: shards table")
    out = open(output).read()
    expect("merged 3 directories of suite smoke" in out, f"output: {out}")


def partial(merged, rc, output, first, copy):
    s = json.load(open(f"{merged}/summary.json"))
    m = s["merge"]
    lost = {i for i in CASES if shard_of(i, 3) == 2}
    held = CASES - lost
    expect({c["id"] for c in s["cases"]} == held, f"cases {[c['id'] for c in s['cases']]}")
    expect({x["id"] for x in m["missing"]} == lost, f"missing {m['missing']}")
    expect(m["absent_shards"] == ["2/3"], f"absent {m['absent_shards']}")
    dups = {d["id"]: d for d in m["duplicates"]}
    expect(set(dups) == {i for i in CASES if shard_of(i, 3) == 1}, f"duplicates {list(dups)}")
    for d in dups.values():
        expect(d["kept"]["shard_dir"] == first, f"kept {d['kept']}")
        expect([x["shard_dir"] for x in d["dropped"]] == [copy], f"dropped {d['dropped']}")
    expect(int(rc) == 1, f"merge with a missing case exited {rc}, not 1")
    out = open(output).read()
    for want in ["MISSING different-prompts-on-tp-ranks [fix] seed 7: shard 2/3 is not among",
                 "ABSENT shard 2/3", "DUPLICATE world-size-mismatch seed 7: in " + first,
                 "kept the copy from " + first + " (the first directory given)"]:
        expect(want in out, f"output lacks {want!r}:\n{out}")
    kinds = check_junit(f"{merged}/junit.xml", held, lost)
    expect(kinds["error"] >= len(lost), f"junit errors {kinds}")
    check_metrics(f"{merged}/metrics.prom", len(held), len(lost))
    html = open(f"{merged}/report.html").read()
    expect('id="missing"' in html and 'id="duplicates"' in html, "report: missing, duplicates")


def edit(suite_dir, what, value):
    path = f"{suite_dir}/summary.json"
    s = json.load(open(path))
    if what == "suite":
        s["suite"] = value
    elif what == "shard":
        s["selection"]["shard"] = value
    else:
        del s["selection"]["planned"][int(value)]
    json.dump(s, open(path, "w"))


def main(argv):
    cmd = argv[1]
    if cmd == "complete":
        complete(*argv[2:5])
    elif cmd == "partial":
        partial(*argv[2:7])
    elif cmd == "metrics":
        check_metrics(argv[2], int(argv[3]), int(argv[4]))
    elif cmd == "edit":
        edit(*argv[2:5])
    else:
        fail(f"unknown check {cmd}")


if __name__ == "__main__":
    main(sys.argv)
