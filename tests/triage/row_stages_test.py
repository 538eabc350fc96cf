#!/usr/bin/python3
"""Tests of harness/triage/row_stages.py (stop 59): a row's matches counted by labelled stage on
the tune split only, and the rows it lists to mark `reinfer`."""
import contextlib
import io
import json
import pathlib
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness" / "triage"))
import row_stages  # noqa: E402

ROWS = """signatures:
  - id: said-hang
    needle: "hang"
    icase: true
    regex: '\\bhang(s|ing)?\\b'
    symptoms: {"4.11": 1.6}
  - id: init-hang
    needle: "init_process_group"
    regex: 'init_process_group\\b.*\\bhangs\\b'
    symptoms: {"2.2": 3}
  - id: upper-oom
    needle: "oom"
    icase: true
    regex: '\\bOOM\\b'
    symptoms: {"4.2": 3}
  - id: version-line
    needle: "torch"
    regex: '^torch==\\d'
    env: true
    symptoms: {"1.2": 0.5}
"""


def issue(n, split, stage, errors, env=()):
    return {"id": f"a/b#{n}", "split": split, "stage": stage, "error_lines": list(errors),
            "env_lines": list(env)}


CORPUS = [
    issue(1, "tune", 4, ["Training HANGS at step 10"]),
    issue(2, "tune", 2, ["init_process_group hangs on node 2"]),
    issue(3, "tune", 2, ["the rendezvous hangs"], ["torch==2.1.0"]),
    issue(4, "tune", 4, ["it is hanging after the backward"]),
    issue(5, "tune", 4, [], []),  # no input lines: not read
    issue(6, "test", 2, ["hangs", "hangs again"]),  # the test split is never read
    issue(7, "tune", 1, ["pipeline stuck"], ["torch==2.0"]),
    issue(8, "tune", 3, ["got an Oom while loading"]),
    issue(9, "tune", 4, ["zoom in on the loss"]),  # \b keeps its meaning: no oom here
]


class RowStages(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = pathlib.Path(self.tmp.name)
        (d / "sig").mkdir()
        (d / "sig" / "t.yaml").write_text(ROWS, encoding="utf-8")
        (d / "issues.jsonl").write_text("\n".join(json.dumps(i) for i in CORPUS) + "\n",
                                        encoding="utf-8")
        self.args = ["--corpus", str(d / "issues.jsonl"), "--signatures", str(d / "sig")]

    def tearDown(self):
        self.tmp.cleanup()

    def run_main(self, *extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(row_stages.main(self.args + list(extra)), 0)
        return out.getvalue()

    def test_a_row_counts_the_tune_issues_it_matches_by_stage(self):
        rows = row_stages.load_rows(pathlib.Path(self.tmp.name) / "sig")
        tune = [i for i in CORPUS if i["split"] == "tune" and (i["error_lines"] or i["env_lines"])]
        t = row_stages.tally(rows, tune)
        fname, own, st = t["said-hang"]
        self.assertEqual((fname, own), ("t.yaml", 4))
        self.assertEqual(dict(st), {4: 2, 2: 2})  # icase: HANGS; "hanging"; not "stuck"
        self.assertEqual(dict(t["init-hang"][2]), {2: 1})
        self.assertEqual(dict(t["version-line"][2]), {2: 1, 1: 1})  # env lines are input too
        # an icase regex is lower-cased as the binary's lower_pattern does: \bOOM\b finds "Oom"
        self.assertEqual(dict(t["upper-oom"][2]), {3: 1})
        self.assertEqual(row_stages.lower_pattern(r"\bOOM\W+Err"), r"\boom\W+err")

    def test_rows_whose_stage_holds_under_the_share_are_listed(self):
        self.assertEqual(self.run_main("--mark", "--min-n", "2").split(), ["said-hang",
                                                                          "version-line"])
        # each holds its own stage in half its matches: under a share of 0.5 neither is listed
        self.assertEqual(self.run_main("--mark", "--min-n", "2", "--max-share", "0.5").split(), [])
        self.assertEqual(self.run_main("--mark", "--min-n", "5").split(), [])  # too few matches

    def test_the_table_reads_only_the_tune_split(self):
        out = self.run_main("--min-n", "2")
        self.assertIn("7 tune issues with input lines", out)
        self.assertIn("| said-hang | t.yaml | 4 | 4 | 0.50 | 2: 2, 4: 2 | yes |", out)
        self.assertIn("| init-hang | t.yaml | 2 | 1 | 1.00 | 2: 1 |  |", out)

    def test_a_corpus_line_that_is_not_json_names_its_file_and_line(self):
        bad = pathlib.Path(self.tmp.name) / "bad.jsonl"
        bad.write_text(json.dumps(CORPUS[0]) + "\n{not json\n", encoding="utf-8")
        with self.assertRaises(SystemExit) as e:
            row_stages.main(["--corpus", str(bad), "--signatures", self.args[3]])
        self.assertIn(f"{bad}:2: not JSON", str(e.exception))


if __name__ == "__main__":
    unittest.main()
