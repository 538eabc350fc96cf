#!/usr/bin/env python3
"""ctest scenarios.json_schema: the scenario JSON Schema (`faultline keys --json-schema`) is the
committed docs/scenario.schema.json, is a valid draft-07 schema, accepts every scenario under
scenarios/ and every file `faultline new` writes, and refuses what the loader refuses: an unknown
key (top level, in a section, in a fault), a wrong type, a value outside an enum or a range, a
missing name, a fix that renames the scenario. Exit 77 (skipped) without python3's jsonschema
and yaml (Debian: python3-jsonschema python3-yaml).

  json_schema_test.py FAULTLINE_BIN SOURCE_DIR
"""
import copy
import json
import pathlib
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import yaml
except ImportError as e:
    print(f"SKIP: {e} (Debian: python3-jsonschema python3-yaml)")
    sys.exit(77)

NOT_SCENARIOS = {"catalog.yaml", "taxonomy.yaml"}


def scenario_files(src):
    root = src / "scenarios"
    for p in sorted(root.rglob("*.yaml")):
        if p.name in NOT_SCENARIOS or "suites" in p.relative_to(root).parts:
            continue
        yield p


def main(cli, src):
    src = pathlib.Path(src)
    text = subprocess.run([cli, "keys", "--json-schema"], check=True, capture_output=True,
                          text=True).stdout
    committed = (src / "docs/scenario.schema.json").read_text()
    if text != committed:
        print("FAIL: docs/scenario.schema.json is not `faultline keys --json-schema`; regenerate: "
              "build/harness/faultline keys --json-schema > docs/scenario.schema.json")
        return 1
    schema = json.loads(text)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    failures = 0
    count = 0
    for p in scenario_files(src):
        doc = yaml.safe_load(p.read_text())
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        count += 1
        for e in errors[:3]:
            failures += 1
            print(f"FAIL: {p.relative_to(src)}: {'.'.join(map(str, e.path))}: {e.message}")
    print(f"{count} scenario files checked against the schema")
    if count < 100:
        print(f"FAIL: only {count} scenario files found under {src}/scenarios")
        return 1

    # What the loader refuses, the schema refuses too.
    base = yaml.safe_load((src / "scenarios/symptoms/4.11-frozen-rank.yaml").read_text())
    bad = {
        "an unknown top-level key": lambda d: d.update(colour="red"),
        "an unknown key in a section": lambda d: d["topology"].update(rank=4),
        "an unknown key in a fault": lambda d: d["faults"][0].update(sginal="STOP"),
        "a string where an integer goes": lambda d: d["topology"].update(ranks="four"),
        "a value outside the enum": lambda d: d["faults"][0].update(signal="STOPP"),
        "a value outside the range": lambda d: d["topology"].update(ranks=100000),
        "no name": lambda d: d.pop("name"),
        "a fix that renames the scenario": lambda d: d["fix"].update(name="other"),
        "an unknown key in expect.of": lambda d: d["expect"].update(
            oracle="any", of=[{"oracle": "hang", "hang_sec": 4}]),
        "a rank_env key that is no rank": lambda d: d.update(rank_env={"two": {"A": "1"}}),
    }
    for what, edit in bad.items():
        doc = copy.deepcopy(base)
        edit(doc)
        if validator.is_valid(doc):
            failures += 1
            print(f"FAIL: the schema accepts {what}")
    if not validator.is_valid(base):
        failures += 1
        print("FAIL: the schema refuses 4.11-frozen-rank.yaml")

    # Every file `faultline new` writes validates (the loader checked it when it wrote it).
    with tempfile.TemporaryDirectory() as tmp:
        for what in ["train", "infer", "command", "4.11", "2.1"]:
            out = pathlib.Path(tmp) / f"new-{what}.yaml"
            subprocess.run([cli, "new", what, "-o", str(out)], check=True, capture_output=True)
            first = out.read_text().splitlines()[0]
            if not first.startswith("# yaml-language-server: $schema="):
                failures += 1
                print(f"FAIL: new {what}: no schema line: {first}")
            errors = list(validator.iter_errors(yaml.safe_load(out.read_text())))
            for e in errors[:3]:
                failures += 1
                print(f"FAIL: new {what}: {'.'.join(map(str, e.path))}: {e.message}")
    if failures:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
