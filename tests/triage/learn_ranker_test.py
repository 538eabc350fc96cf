#!/usr/bin/python3
"""Tests of harness/triage/learn_ranker.py: it counts the ranker's priors from the tune split only,
the counts follow the tune labels exactly, and its output is deterministic."""
import json
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "harness" / "triage"))
from learn_tokens import split_of  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "harness" / "triage" / "learn_ranker.py"

# Ids whose split the corpus rule (sha1 mod 5) fixes: the first four are test, the others tune.
TEST_IDS = ["pytorch/pytorch#900000", "pytorch/pytorch#900001", "pytorch/pytorch#900002",
            "pytorch/pytorch#900003"]
TUNE_IDS = [f"pytorch/pytorch#{n}" for n in (900004, 900006, 900008, 900012, 900013, 900016,
                                             900018, 900019, 900020)]
HANG = "Misaligned data, model, and training graph"
OOM = "Constrained resource and inefficient utilization"


def issue(iid, split, symptoms, cause, stage, lines=("x",)):
    num = iid.split("#")[1]
    return {"id": iid, "url": f"https://github.com/pytorch/pytorch/issues/{num}", "split": split,
            "framework": "pytorch", "error_lines": list(lines), "env_lines": [], "summary": "s",
            "symptoms": symptoms, "root_cause": cause, "stage": stage, "fix_pattern": None,
            "fix": None}


def learn(records, name="priors.yaml", *args):
    """The file `name` that learn_ranker.py writes next to --out (priors.yaml, words.yaml)."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp, "c.jsonl")
        corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        out = pathlib.Path(tmp, "priors.yaml")
        subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus), "--out", str(out),
                        *args], check=True, capture_output=True, text=True)
        return pathlib.Path(tmp, name).read_text(encoding="utf-8")


def run_with_stand_in(records, fake, *args):
    """learn_ranker.py's stdout on `records` as a corpus, with the script `fake` as faultline."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp, "c.jsonl")
        corpus.write_text("".join((json.dumps(r) if r is not None else "") + "\n"  # None: blank
                                  for r in records), encoding="utf-8")
        faultline = pathlib.Path(tmp, "faultline")
        faultline.write_text(fake, encoding="utf-8")
        faultline.chmod(0o755)
        return subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus), *args,
                               "--faultline", str(faultline)], check=True, capture_output=True,
                              text=True).stdout


class LearnRankerTest(unittest.TestCase):
    def corpus(self):
        recs = [issue(i, "tune", ["4.11", "4.7"], HANG, 4) for i in TUNE_IDS[:3]]
        recs += [issue(i, "tune", ["4.2"], OOM, 4) for i in TUNE_IDS[3:8]]
        recs += [issue(TUNE_IDS[8], "tune", ["none"], "none", 0)]
        # Labels only the test split holds: they must never be counted.
        recs += [issue(i, "test", ["5.3"], "Faulty inference logic and framework limitation", 5)
                 for i in TEST_IDS]
        return recs

    def test_the_test_split_is_never_counted(self):
        text = learn(self.corpus())
        self.assertNotIn("5.3", text)
        self.assertNotIn('"5"', text)
        self.assertIn("issues: 8\n", text)

    def test_the_tallies_follow_the_tune_labels(self):
        text = learn(self.corpus())
        self.assertIn('stage_symptoms:\n  "4": {"4.2": 5, "4.11": 3}\n', text)
        self.assertIn('  "4.11": {"4.7": 3, "4.11": 3}\n', text)
        self.assertIn('  "4.7": {"4.7": 3, "4.11": 3}\n', text)
        self.assertIn('symptom_root_causes:\n  "4.2": {"R4.5": 5}\n  "4.11": {"R4.6": 3}\n', text)
        self.assertIn('stage_root_causes:\n  "4": {"R4.5": 5, "R4.6": 3}\n', text)

    def test_a_test_issue_mislabelled_tune_is_still_skipped(self):
        recs = self.corpus() + [issue(TEST_IDS[0], "tune", ["5.3"], "none", 5)]
        self.assertNotIn("5.3", learn(recs))

    def test_a_word_of_three_launch_issues_points_at_stage_two(self):
        launch = "Flawed launcher and environment configuration"
        recs = [issue(i, "tune", ["2.1"], launch, 2, ["zebrarendezvous failed"])
                for i in TUNE_IDS[:3]]
        recs += [issue(i, "tune", ["4.2"], OOM, 4, ["plain failure text"]) for i in TUNE_IDS[3:]]
        recs += [issue(i, "test", ["2.1"], launch, 2, ["testonlyword"]) for i in TEST_IDS]
        text = learn(recs)
        self.assertIn('  "zebrarendezvous": {"2": ', text)
        self.assertNotIn('"plain"', text)  # the majority stage's word: lift under 2
        self.assertNotIn("testonlyword", text)

    def test_the_output_is_deterministic(self):
        recs = self.corpus()
        self.assertEqual(learn(recs), learn(list(reversed(recs))))

    # words.yaml (stop 48): the learned word ranker's counts, from tune failures only.
    def word_corpus(self):
        recs = [issue(i, "tune", ["4.5", "4.2"], OOM, 4, ["nvme swapper failed", "x99 x"])
                for i in TUNE_IDS[:3]]
        recs += [issue(TUNE_IDS[3], "tune", ["4.11"], HANG, 4, ["onceonly hang, swapper idle"])]
        recs += [issue(i, "tune", ["2.1"], "Flawed launcher and environment configuration", 2,
                       ["rendezvous failed"]) for i in TUNE_IDS[4:6]]
        recs += [issue(TUNE_IDS[6], "tune", ["none"], "none", 0, ["nvme question nvme"])]
        recs += [issue(i, "test", ["5.3"], "Faulty inference logic and framework limitation", 5,
                       ["nvme testonlyword"]) for i in TEST_IDS]
        return recs

    def test_the_word_counts_follow_the_tune_failures(self):
        text = learn(self.word_corpus(), "words.yaml")
        self.assertIn("issues: 6\n", text)
        # primary symptoms 1, secondary 0.5; a stage per failure
        self.assertIn('classes:\n  "root_causes": {"R2.1": 2, "R4.5": 3, "R4.6": 1}\n'
                      '  "stages": {"2": 2, "4": 4}\n'
                      '  "symptoms": {"2.1": 2.0, "4.2": 1.5, "4.5": 3.0, "4.11": 1.0}\n', text)
        self.assertIn('  "nvme": {"4.2": 1.5, "4.5": 3.0}\n', text)
        self.assertIn('  "swapper": {"4.2": 1.5, "4.5": 3.0, "4.11": 1.0}\n', text)
        self.assertIn('word_stages:\n', text)
        self.assertIn('  "swapper": {"4": 4}\n', text)
        self.assertIn('  "failed": {"2": 2, "4": 3}\n', text)

    def test_label_text_counts_a_tune_failures_summary_and_fix_words_unless_none(self):
        # stop 61 (on since stop 62): words.yaml counts the words of a tune failure's own summary
        # and fix lines beside its input lines; --label-text none reads input lines only, and a
        # test issue's labels are never read.
        recs = self.word_corpus()
        for r in recs[:2]:
            r["summary"] = "labelword seen by the labeller"
        recs[2]["fix"], recs[2]["fix_pattern"] = "labelword again", "F6"
        for r in recs[-2:]:
            r["summary"] = "testlabelword"
        self.assertNotIn("labelword", learn(recs, "words.yaml", "--label-text", "none"))
        text = learn(recs, "words.yaml")
        self.assertEqual(text, learn(recs, "words.yaml", "--label-text", "summary,fix"))
        self.assertIn('  "labelword": {"4.2": 1.5, "4.5": 3.0}\n', text)
        self.assertNotIn("testlabelword", text)
        self.assertIn("(input lines, and their summary and fix lines)", text)
        only = learn(recs, "words.yaml", "--label-text", "summary")
        self.assertIn('  "labelword": {"4.2": 1.0, "4.5": 2.0}\n', only)
        bad = subprocess.run([sys.executable, str(SCRIPT), "--label-text", "summary,summary"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--label-text 'summary,summary': use summary, fix or summary,fix (or none)",
                      bad.stderr)

    def test_the_root_cause_counts_follow_the_tune_failures(self):
        # stop 49: word -> root cause -> tune failures holding the word (each failure once)
        text = learn(self.word_corpus(), "words.yaml")
        self.assertIn('word_root_causes:\n', text)
        rows = text.split("word_root_causes:\n")[1]
        self.assertIn('  "nvme": {"R4.5": 3}\n', rows)
        self.assertIn('  "swapper": {"R4.5": 3, "R4.6": 1}\n', rows)
        self.assertIn('  "failed": {"R2.1": 2, "R4.5": 3}\n', rows)
        self.assertNotIn("R5", text)  # the test issues' root cause
        self.assertNotIn("question", rows)

    def test_a_failure_whose_root_cause_is_not_in_the_catalogue_counts_no_root_cause(self):
        recs = self.word_corpus()
        recs[0]["root_cause"] = "not a root cause of the catalogue"
        text = learn(recs, "words.yaml")
        self.assertIn('  "root_causes": {"R2.1": 2, "R4.5": 2, "R4.6": 1}\n', text)
        self.assertIn('  "nvme": {"R4.5": 2}\n', text.split("word_root_causes:\n")[1])
        self.assertIn('"4.5": 3.0', text)  # its symptom and stage still count

    def test_each_cv_fold_counts_the_root_causes_of_its_training_part_only(self):
        # --cv copies the ranker folder per fold (ranker_copy) and counts both files on the
        # fold's training issues: a held-out issue's root cause never reaches its words.yaml.
        sys.path.insert(0, str(SCRIPT.parent))
        import learn_ranker  # noqa: E402
        recs = self.word_corpus()[:7]
        rc_ids = {OOM: "R4.5", HANG: "R4.6", "Flawed launcher and environment configuration": "R2.1"}
        for r in recs:
            r["_rc"] = rc_ids.get(r["root_cause"])
        train = [r for r in recs if r["_rc"] != "R4.6"]  # the 4.11 hang is held out
        with tempfile.TemporaryDirectory() as tmp:
            learn_ranker.ranker_copy(pathlib.Path(tmp, "fold"), train, [])
            text = pathlib.Path(tmp, "fold", "words.yaml").read_text(encoding="utf-8")
        self.assertIn('  "swapper": {"R4.5": 3}\n', text.split("word_root_causes:\n")[1])
        self.assertNotIn("R4.6", text)

    def test_thin_tables_drop_a_dropped_row_from_the_context_rows_that_name_it(self):
        # --thin drops the rows only a held-out issue matches; a context row naming one must lose
        # that id (the loader refuses a context row naming a row it does not have), and a context
        # row left with no id goes too.
        try:
            import yaml
        except ImportError:
            self.skipTest("PyYAML is not installed")
        sys.path.insert(0, str(SCRIPT.parent))
        import learn_ranker  # noqa: E402

        def row(rid, word, **extra):
            return dict({"id": rid, "needle": word, "regex": word}, **extra)
        doc = {"signatures": [row("held-only", "alphaword"), row("kept", "betaword"),
                              row("ctx-both", "gammaword", context_for=["held-only", "kept"]),
                              row("ctx-held", "deltaword", context_for=["held-only"])]}
        train = [{"error_lines": ["betaword gammaword deltaword"], "env_lines": []}]
        held = [{"error_lines": ["alphaword"], "env_lines": []}]
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = pathlib.Path(tmp, "src"), pathlib.Path(tmp, "dst")
            src.mkdir()
            dst.mkdir()
            (src / "t.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
            dropped = learn_ranker.thin_tables(src, dst, train, held)
            out = yaml.safe_load((dst / "t.yaml").read_text(encoding="utf-8"))
        rows = {r["id"]: r for r in out["signatures"]}
        self.assertEqual(sorted(rows), ["ctx-both", "kept"])
        self.assertEqual(rows["ctx-both"]["context_for"], ["kept"])
        self.assertEqual(dropped, 2)

    def test_a_word_of_one_failure_or_only_of_test_issues_is_left_out(self):
        text = learn(self.word_corpus(), "words.yaml")
        self.assertNotIn("onceonly", text)  # in one tune failure only
        self.assertNotIn("testonlyword", text)
        self.assertNotIn("question", text)  # a non-failure's words are not counted
        self.assertNotIn('"5', text)
        self.assertNotIn("x99", text)  # learn_tokens.py's rule: half or more digits; "x" too short

    def test_the_word_file_is_deterministic(self):
        recs = self.word_corpus()
        self.assertEqual(learn(recs, "words.yaml"), learn(list(reversed(recs)), "words.yaml"))

    def test_a_word_spread_over_every_stage_is_no_stage_word(self):
        """Stop 49 (round 5): 'spreadword' is of stage 1 often enough for a lift over 2 (3 of its
        6 failures against a share of 1 in 5) but is also in stages 2, 3 and 4: about 4 bits of
        the stage over 25 failures, under --min-gain's 7; 'focusword' (3 failures, all of stage
        1) tells 8.4 bits and stays."""
        ids = [f"pytorch/pytorch#{n}" for n in range(900004, 901000)
               if split_of(f"pytorch/pytorch#{n}") == "tune"][:25]
        recs = []
        for k, iid in enumerate(ids):
            stage, nth = k // 5 + 1, k % 5
            words = ["plain"]
            if (stage == 1 and nth < 3) or (stage in (2, 3, 4) and nth == 0):
                words.append("spreadword")
            if stage == 1 and nth < 3:
                words.append("focusword")
            recs.append(issue(iid, "tune", [f"{stage}.1"], HANG, stage, [" ".join(words)]))
        text = learn(recs)
        self.assertIn('  "focusword": {"1": ', text)
        self.assertNotIn('"spreadword"', text)

    def test_the_word_model_alone_is_refit_on_each_fold(self):
        """Stop 50: --cv-words scores the word model on each fold's held-out failures, counted
        on the other folds only. 'servword' is in two stage-5 failures that 2-fold CV puts in
        different folds: in-sample it is a word of two failures and names stage 5 for both; held
        out, each fold's training part holds it once (under the 2 failures a word needs), so both
        get the majority stage 4."""
        fold0 = ["pytorch/pytorch#900006", "pytorch/pytorch#900008", "pytorch/pytorch#900013"]
        fold1 = ["pytorch/pytorch#900004", "pytorch/pytorch#900012", "pytorch/pytorch#900018"]
        recs = [issue(i, "tune", ["4.11"], HANG, 4, ["plain loss"]) for i in fold0[1:] + fold1[1:]]
        recs += [issue(i, "tune", ["5.1"], HANG, 5, ["plain servword"])
                 for i in (fold0[0], fold1[0])]
        with tempfile.TemporaryDirectory() as tmp:
            corpus = pathlib.Path(tmp, "c.jsonl")
            corpus.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
            out = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus),
                                  "--cv-words", "2"], check=True, capture_output=True,
                                 text=True).stdout
        self.assertIn("word model alone, 2-fold CV: stage 66.7% (4/6)", out)
        self.assertIn("word model alone, in-sample: stage 100.0% (6/6)", out)

    def test_the_non_failure_score_is_counted_on_the_other_folds(self):
        """Stop 50: --cv-words ranks each held-out input by P(non-failure | words) counted on the
        other folds. 'quuxask' is in two non-failures of each of the 2 folds, so each fold's
        training part holds it twice and all four held-out non-failures rank first; 'onceask' is
        in one non-failure per fold, under the 2 a word needs: every input then holds the same
        counted words, and the tie goes by id (the two non-failures have the largest ids)."""
        fold0 = ["pytorch/pytorch#900006", "pytorch/pytorch#900008", "pytorch/pytorch#900013",
                 "pytorch/pytorch#900016", "pytorch/pytorch#900019"]
        fold1 = ["pytorch/pytorch#900004", "pytorch/pytorch#900012", "pytorch/pytorch#900018",
                 "pytorch/pytorch#900020", "pytorch/pytorch#900023"]
        for word, want in (("quuxask", "4 of the 4"), ("onceask", "0 of the 2")):
            nf = fold0[:2] + fold1[:2] if word == "quuxask" else [fold0[4], fold1[4]]
            recs = [issue(i, "tune", ["none"], "none", 0, [f"plain loss {word}"]) for i in nf]
            recs += [issue(i, "tune", ["4.11"], HANG, 4, ["plain loss"])
                     for i in fold0 + fold1 if i not in nf]
            with tempfile.TemporaryDirectory() as tmp:
                corpus = pathlib.Path(tmp, "c.jsonl")
                corpus.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
                out = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus),
                                      "--cv-words", "2"], check=True, capture_output=True,
                                     text=True).stdout
            self.assertIn(f"non-failure score, 2-fold CV: {want} held-out non-failures", out)

    def test_cv_lists_the_stage_confusions_of_the_ranker(self):
        """Stop 51: --cv counts the ranker's answers by labelled stage and answered stage, over all
        answers and over those of an inferred stage, from the lines of `triage --eval -v`. A stand-in
        for faultline answers stage 4 to everything, calls the stage-3 answers inferred and the
        tables alone 'none'; the labels are 3 stage-4, 3 stage-3 and 1 non-failure issue."""
        recs = [issue(i, "tune", ["4.2"], OOM, 4) for i in TUNE_IDS[:3]]
        recs += [issue(i, "tune", ["3.1"], "none", 3) for i in TUNE_IDS[3:6]]
        recs += [issue(TUNE_IDS[6], "tune", ["none"], "none", 0)]
        fake = textwrap.dedent("""\
            #!/usr/bin/python3
            import json, sys
            a = sys.argv
            recs = [json.loads(l) for l in open(a[a.index("--eval") + 1])]
            ranker = a[a.index("--ranker") + 1] != "none"
            for r in recs:
                got = "4.2   stage 4 R4.5 " if ranker else "none  stage 0 none "
                weak = " (weak: inferred stage)" if ranker and r["stage"] == 3 else ""
                print(f"  {r['id']:<32} label {r['symptoms'][0]:<10} stage {r['stage']} R4.5  "
                      f"| got {got} ok{weak}")
            print("| top-1 symptom | 50.0% (1/2) |")
            print("| top-3 symptom | 50.0% (1/2) |")
            """)
        out = run_with_stand_in(recs, fake, "--cv", "2")
        self.assertIn("2-fold CV on tune, ranker, every answer: labelled stage (rows)", out)
        self.assertIn("| 0 | 0 | 0 | 0 | 0 | 1 | 0 | 1 of 1 |\n| 3 | 0 | 0 | 0 | 0 | 3 | 0 | 3 of 3 |"
                      "\n| 4 | 0 | 0 | 0 | 0 | 3 | 0 | 0 of 3 |\n", out)
        inferred = out.split("answers of an inferred stage")[1]
        self.assertIn("| 3 | 0 | 0 | 0 | 0 | 3 | 0 | 3 of 3 |", inferred)
        self.assertNotIn("\n| 4 | ", inferred)

    def test_forward_cv_counts_each_round_on_the_lines_above_it_only(self):
        """Stop 62: --forward holds out each --released range of corpus lines in turn and counts
        the ranker on the tune issues of the lines above it: a stand-in faultline prints, for each
        held-out issue, the ids of its ranker folder's neighbours.jsonl and the failures
        priors.yaml counted. A test issue (line 4, inside the first round) is neither held out nor
        counted; a blank line (6) still counts as a line; lines after the last round (11) are
        trained on by no round."""
        tune = [issue(i, "tune", ["4.2"], OOM, 4, ["word" + str(n)]) for n, i in enumerate(TUNE_IDS)]
        recs = tune[:3] + [issue(TEST_IDS[0], "test", ["4.2"], OOM, 4)] + tune[3:4] + [None] + tune[4:]
        fake = textwrap.dedent("""\
            #!/usr/bin/python3
            import json, pathlib, sys
            a = sys.argv
            recs = [json.loads(l) for l in open(a[a.index("--eval") + 1])]
            ranker = a[a.index("--ranker") + 1]
            seen, counted = [], "-"
            if ranker != "none":
                lines = pathlib.Path(ranker, "neighbours.jsonl").read_text().splitlines()
                seen = [json.loads(l)["id"] for l in lines[1:]]  # after its header line
                priors = pathlib.Path(ranker, "priors.yaml").read_text()
                counted = priors.split("\\nissues: ")[1].split()[0]
            for r in recs:
                print(f"  {r['id']:<32} label 4.2        stage 4 R4.5  | got 4.2   stage 4 R4.5  ok "
                      f"counted {counted} trained-on {','.join(seen) or '-'}")
            print(f"| top-1 symptom | 50.0% (1/{len(recs)}) |")
            print(f"| top-3 symptom | 50.0% (1/{len(recs)}) |")
            """)
        out = run_with_stand_in(recs, fake, "--forward", "--released", "3-5,8-10", "-v")
        got = {}
        for line in out.splitlines():
            if " trained-on " in line:
                counted = line.split(" counted ")[1].split()[0]
                got[line.split()[0]] = (counted, line.split(" trained-on ")[1].split(","))
        first, second = ("2", TUNE_IDS[:2]), ("5", TUNE_IDS[:5])
        self.assertEqual(got, {TUNE_IDS[2]: first, TUNE_IDS[3]: first, TUNE_IDS[5]: second,
                               TUNE_IDS[6]: second, TUNE_IDS[7]: second})
        self.assertIn("lines 3-5: 2 held-out issues, 2 training issues", out)
        self.assertIn("lines 8-10: 3 held-out issues, 5 training issues", out)
        self.assertIn("forward CV over 2 released dev splits, ranker: top-1 symptom 40.0% (2/5)",
                      out)
        for args, error in ((["--forward", "--released", "5-4"],
                             "--released: '5-4' is not FIRST-LAST with 2 <= FIRST <= LAST"),
                            (["--forward", "--released", "3-5,5-9"],
                             "--released: '5-9' does not start after the range before it"),
                            (["--released", "3-5"], "--released: only with --forward"),
                            (["--forward", "--cv", "5"], "--forward: its rounds are the released")):
            bad = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                                 text=True)
            self.assertEqual(bad.returncode, 2, args)
            self.assertIn(error, bad.stderr)

    def test_the_released_splits_are_tune_lines_of_the_corpus(self):
        """Stop 62: RELEASED names the six released dev splits by their lines of the shipped
        corpus (the sizes DEV.md gives); each range holds tune issues only, and no round trains on
        a line at or after its first (stop 54's stops before its second round, line 2599)."""
        sys.path.insert(0, str(SCRIPT.parent))
        import learn_ranker  # noqa: E402  (the script's own table)
        lines = (REPO / "harness" / "triage" / "corpus" / "issues.jsonl").read_text(
            encoding="utf-8").split("\n")
        sizes = []
        for name, first, last, below in learn_ranker.RELEASED:
            recs = [json.loads(x) for x in lines[first - 1:last]]
            self.assertTrue(all(r["split"] == "tune" for r in recs), name)
            self.assertLessEqual(below, first, name)
            sizes.append(len(recs))
        self.assertEqual(sizes, [211, 219, 247, 241, 257, 166])

    def test_nested_cv_scores_the_setting_the_inner_folds_chose(self):
        """Stop 51: --nested picks a setting on the inner CV and scores it on the outer fold. A
        stand-in faultline answers an issue right when co_weight is 2 and the issue says 'good2',
        or co_weight is 1 and it does not. Every issue of one fold says 'good2', none of the other:
        each setting is right on one fold (plain CV 5 of 10 each), and each outer fold gets the
        setting its other fold chose, which is wrong there (nested 0 of 10)."""
        fold0 = ["pytorch/pytorch#900006", "pytorch/pytorch#900008", "pytorch/pytorch#900013",
                 "pytorch/pytorch#900016", "pytorch/pytorch#900019"]
        fold1 = ["pytorch/pytorch#900004", "pytorch/pytorch#900012", "pytorch/pytorch#900018",
                 "pytorch/pytorch#900020", "pytorch/pytorch#900023"]
        recs = [issue(i, "tune", ["4.2"], OOM, 4, ["good2 oom"]) for i in fold0]
        recs += [issue(i, "tune", ["4.2"], OOM, 4, ["good1 oom"]) for i in fold1]
        fake = textwrap.dedent("""\
            #!/usr/bin/python3
            import json, pathlib, re, sys
            a = sys.argv
            recs = [json.loads(l) for l in open(a[a.index("--eval") + 1])]
            cues = pathlib.Path(a[a.index("--ranker") + 1], "cues.yaml").read_text()
            two = re.search(r"co_weight: *(\\S+)", cues).group(1) == "2"
            n = sum(("good2" in r["error_lines"][0]) == two for r in recs)
            for m in ("top-1 symptom", "top-3 symptom", "stage", "root cause"):
                print(f"| {m} | 0.0% ({n}/{len(recs)}) |")
            """)
        out = run_with_stand_in(recs, fake, "--cv", "2", "--nested", "co_weight=1,2")
        self.assertIn("2-fold CV on tune, top-3 symptom: co_weight=1 5, co_weight=2 5; "
                      "nested 0 of 10", out)
        self.assertIn("outer fold 0: inner CV chose co_weight=1", out)
        self.assertIn("outer fold 1: inner CV chose co_weight=2", out)

    def test_a_nested_setting_without_values_is_a_usage_error_naming_it(self):
        for bad in ("co_weight", "co_weight=", "co_weight=1,,2", "=1,2"):
            out = subprocess.run([sys.executable, str(SCRIPT), "--cv", "3", "--nested", bad],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, bad)
            self.assertIn(f"'{bad}' is not KEY=VALUE", out.stderr)
            self.assertNotIn("Traceback", out.stderr)


if __name__ == "__main__":
    unittest.main()
