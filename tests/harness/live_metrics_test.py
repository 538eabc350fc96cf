#!/usr/bin/env python3
"""The live /metrics endpoint and `faultline status` on real runs (docs/reports.md#live-metrics).

  live_metrics_test.py FAULTLINE_BIN MODE

MODE run: a 2-rank run, each step slowed by a 60 ms data-loader delay (an in-process plan
  that fires on every fetch, four a step), started with --metrics-port 0. Mid-run: a request
  without the secret or with a wrong one is answered 401; with it, the scrape parses with prometheus_client's own text
  parser (Debian's python3-prometheus-client), both ranks are up with a step that increases
  between two scrapes, the plan's firings show as faultline_faults_fired_total{site="data.fetch"};
  `faultline status --json` says running, both ranks alive, nobody missing. After the end,
  status says every rank exited cleanly.
MODE missing: a 2-rank run whose rank 1 is stopped (SIGSTOP) after step 3; once the hang is
  established the harness stops the run; `faultline status` names rank 1 as missing and rank 0
  in its collective.
MODE suite: a suite of two cases (the run above, two seeds) with one job and --metrics-port 0:
  mid-suite one case runs and one is queued (faultline_suite_runs), the running case has a
  duration and `faultline status SUITE_DIR` names it running; at the end both passed.
Exit 77 (skipped) without prometheus_client.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: no prometheus_client (Debian: python3-prometheus-client)")
    sys.exit(77)

FAULTLINE = sys.argv[1]
MODE = sys.argv[2]
DEADLINE_S = 90

SLOW_RUN = """name: live-metrics
description: Two ranks, each loader fetch (four a step) delayed 60 ms, so scrapes see it go.
topology: {ranks: 2, dp: 2}
workload: {model: tiny, steps: 30}
faults:
  - plan: "data.fetch=delay(60)"
expect: {oracle: completed}
timeouts: {run_s: 120}
seed: 7
"""

FROZEN_RUN = """name: frozen-rank-2
description: Rank 1 is stopped (SIGSTOP) after step 3; rank 0 waits in the next all-reduce.
topology: {ranks: 2, dp: 2}
workload: {model: tiny, steps: 40}
faults:
  - {signal: STOP, rank: 1, step: 3}
expect: {symptom: "4.11", oracle: hang, hang_s: 4, ranks: [1]}
timeouts: {run_s: 60, comm_ms: 30000}
seed: 7
"""


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def wait_for(what, check, proc=None):
    """Polls check() until it returns something truthy; fails after DEADLINE_S or once proc
    ended."""
    until = time.monotonic() + DEADLINE_S
    while time.monotonic() < until:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            fail(f"the harness ended (exit {proc.returncode}) before {what}")
        time.sleep(0.2)
    fail(f"no {what} within {DEADLINE_S} s")


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def get(addr, token):
    """(status, body) of GET http://addr/metrics with `token` as the bearer (None: no header)."""
    req = urllib.request.Request(f"http://{addr}/metrics")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(addr, secret):
    """{sample name: [(labels, value)]} of one scrape, through prometheus_client's parser."""
    status, body = get(addr, secret)
    if status != 200:
        fail(f"scrape with the secret answered {status}: {body}")
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def per_rank(samples, name):
    return {int(l["rank"]): v for l, v in samples.get(name, [])}


def status_json(run_dir):
    out = subprocess.run([FAULTLINE, "status", run_dir, "--json"], capture_output=True, text=True,
                         timeout=60, check=False)
    if out.returncode != 0:
        fail(f"faultline status {run_dir} exited {out.returncode}: {out.stderr}")
    return json.loads(out.stdout)


def check_refusals(addr, secret):
    for token, why in ((None, "no token"), ("0" * len(secret), "a wrong token")):
        status, body = get(addr, token)
        if status != 401 or "secret is required" not in body:
            fail(f"a scrape with {why} answered {status} {body!r}, not 401")
    print("no token / wrong token: 401")


def check_run_scrapes(addr, secret):
    first = wait_for("a scrape with both ranks past step 1",
                     lambda: (lambda s: s if len(per_rank(s, "faultline_rank_step")) == 2 and
                              min(per_rank(s, "faultline_rank_step").values()) >= 1 else None)(
                                  scrape(addr, secret)))
    steps1 = per_rank(first, "faultline_rank_step")
    later = wait_for("a later scrape with every rank's step higher",
                     lambda: (lambda s: s if all(per_rank(s, "faultline_rank_step")[r] > steps1[r]
                                                 for r in steps1) else None)(scrape(addr, secret)))
    steps2 = per_rank(later, "faultline_rank_step")
    print(f"steps {steps1} -> {steps2}")
    if per_rank(later, "faultline_rank_up") != {0: 1.0, 1: 1.0}:
        fail(f"faultline_rank_up: {later.get('faultline_rank_up')}")
    if per_rank(later, "faultline_rank_missing") != {0: 0.0, 1: 0.0}:
        fail(f"faultline_rank_missing: {later.get('faultline_rank_missing')}")
    fired = {int(l["rank"]): v for l, v in later.get("faultline_faults_fired_total", [])
             if l.get("site") == "data.fetch" and l.get("action") == "delay(60)"}
    if sorted(fired) != [0, 1] or min(fired.values()) < 1:
        fail(f"faultline_faults_fired_total for data.fetch delay on ranks 0 and 1: "
             f"{later.get('faultline_faults_fired_total')}")
    info = later.get("faultline_run_info", [])
    if len(info) != 1 or info[0][0].get("scenario") != "live-metrics":
        fail(f"faultline_run_info: {info}")
    if later.get("faultline_run_ranks", [({}, 0)])[0][1] != 2:
        fail(f"faultline_run_ranks: {later.get('faultline_run_ranks')}")
    print(f"fired: {fired}")


def start_run(tmp, scenario_text, run_id, extra=()):
    scenario = os.path.join(tmp, f"{run_id}.yaml")
    with open(scenario, "w", encoding="utf-8") as f:
        f.write(scenario_text)
    cmd = [FAULTLINE, "run", scenario, "--results", os.path.join(tmp, "runs"), "--run-id", run_id,
           "-q", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, want_exit):
    out, _ = proc.communicate(timeout=150)
    print(out)
    if proc.returncode != want_exit:
        fail(f"the run exited {proc.returncode}, expected {want_exit}")


def mode_run(tmp):
    proc = start_run(tmp, SLOW_RUN, "live", ["--metrics-port", "0"])
    run_dir = os.path.join(tmp, "runs", "live")
    addr = wait_for("RUN_DIR/metrics.addr", lambda: read(os.path.join(run_dir, "metrics.addr")),
                    proc)
    secret = read(os.path.join(run_dir, "control.secret"))
    print(f"endpoint {addr}")
    check_refusals(addr, secret)
    check_run_scrapes(addr, secret)
    st = status_json(run_dir)
    if not st["running"] or st["alive"] != [0, 1] or st["missing"] != []:
        fail(f"status mid-run: running {st['running']}, alive {st['alive']}, missing "
             f"{st['missing']}")
    finish(proc, 0)
    st = status_json(run_dir)
    states = [(r["state"], r.get("exit_class")) for r in st["ranks"]]
    if st["running"] or states != [("exited", "ok"), ("exited", "ok")]:
        fail(f"status after the end: running {st['running']}, ranks {states}")
    with open(os.path.join(run_dir, "history.jsonl"), encoding="utf-8") as f:
        kinds = [json.loads(line)["kind"] for line in f if line.strip()]
    if "metrics_endpoint" not in kinds:
        fail("no metrics_endpoint event in the history")
    with open(os.path.join(run_dir, "history.jsonl"), encoding="utf-8") as f:
        rejected = [json.loads(line)["data"] for line in f if '"metrics_rejected"' in line]
    if len(rejected) != 1 or rejected[0]["requests"] != 2:
        fail(f"the history should count the two refused requests: {rejected}")
    print("status after the end:", states)


def mode_missing(tmp):
    proc = start_run(tmp, FROZEN_RUN, "frozen")
    finish(proc, 0)  # the hang is the expectation: pass
    run_dir = os.path.join(tmp, "runs", "frozen")
    st = status_json(run_dir)
    if st["missing"] != [1]:
        fail(f"missing {st['missing']}, expected [1]: {json.dumps(st, indent=1)}")
    rank0 = st["ranks"][0]
    if rank0["state"] != "alive" or not rank0["collective"]:
        fail(f"rank 0 should be alive, in a collective: {rank0}")
    text = subprocess.run([FAULTLINE, "status", run_dir], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    print(text)
    if "missing    rank 1: no event for over 3 s while the others went on" not in text:
        fail("the text status does not name rank 1 as missing")


SUITE = """name: live-suite
scenarios: [live.yaml]
seeds: [1, 2]
"""


def mode_suite(tmp):
    with open(os.path.join(tmp, "live.yaml"), "w", encoding="utf-8") as f:
        f.write(SLOW_RUN)
    with open(os.path.join(tmp, "suite.yaml"), "w", encoding="utf-8") as f:
        f.write(SUITE)
    results = os.path.join(tmp, "suites")
    proc = subprocess.Popen([FAULTLINE, "suite", os.path.join(tmp, "suite.yaml"), "--results",
                             results, "-j", "1", "--metrics-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def suite_dir():
        dirs = os.listdir(results) if os.path.isdir(results) else []
        return os.path.join(results, dirs[0]) if dirs else ""

    sdir = wait_for("the suite directory", suite_dir, proc)
    addr = wait_for("SUITE_DIR/metrics.addr", lambda: read(os.path.join(sdir, "metrics.addr")),
                    proc)
    secret = read(os.path.join(sdir, "metrics.secret"))
    check_refusals(addr, secret)

    def one_running():
        s = scrape(addr, secret)
        runs = {l["outcome"]: v for l, v in s.get("faultline_suite_runs", [])}
        return s if runs.get("running") == 1 and runs.get("queued") == 1 else None
    s = wait_for("a scrape with one case running and one queued", one_running, proc)
    running = [l["case"] for l, v in s.get("faultline_case_duration_seconds", [])
               if l["state"] == "running"]
    if running != ["live-metrics-s1"]:
        fail(f"the running case's duration: {s.get('faultline_case_duration_seconds')}")

    def status_names_the_running_run():
        st = status_json(sdir)
        going = [r["run"] for r in st["runs"] if r["outcome"] == "running"]
        return st if going == ["live-metrics-s1"] else None
    st = wait_for("faultline status SUITE_DIR naming the running run", status_names_the_running_run,
                  proc)
    print("status of the suite:", [(r["run"], r["outcome"]) for r in st["runs"]])
    out, _ = proc.communicate(timeout=300)
    print(out)
    if proc.returncode != 0:
        fail(f"the suite exited {proc.returncode}")
    with open(os.path.join(sdir, "summary.json"), encoding="utf-8") as f:
        counts = json.load(f)["counts"]
    if counts.get("pass") != 2:
        fail(f"summary counts {counts}")
    print("suite: one running and one queued mid-suite; both passed")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        {"run": mode_run, "missing": mode_missing, "suite": mode_suite}[MODE](tmp)
    print("PASS")


if __name__ == "__main__":
    main()
