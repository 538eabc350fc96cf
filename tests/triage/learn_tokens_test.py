#!/usr/bin/python3
"""Tests of harness/triage/learn_tokens.py: it learns from the tune split only, its weights follow
the tune labels, and its output is deterministic."""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "harness" / "triage" / "learn_tokens.py"

# Ids whose split the corpus rule (sha1 mod 5) fixes: the first four are test, the others tune.
TEST_IDS = ["pytorch/pytorch#900000", "pytorch/pytorch#900001", "pytorch/pytorch#900002",
            "pytorch/pytorch#900003"]
TUNE_IDS = [f"pytorch/pytorch#{n}" for n in (900004, 900006, 900008, 900012, 900013, 900016,
                                             900018, 900019, 900020)]


def issue(iid, split, lines, symptom, cause, stage):
    num = iid.split("#")[1]
    return {"id": iid, "url": f"https://github.com/pytorch/pytorch/issues/{num}", "split": split,
            "framework": "pytorch", "error_lines": lines, "env_lines": [], "summary": "s",
            "symptoms": [symptom], "root_cause": cause, "stage": stage, "fix_pattern": None,
            "fix": None}


def learn(records, *extra):
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pathlib.Path(tmp, "c.jsonl")
        corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        out = pathlib.Path(tmp, "learned.yaml")
        subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus), "--out", str(out),
                        *extra], check=True, capture_output=True, text=True)
        return out.read_text(encoding="utf-8")


class LearnTokensTest(unittest.TestCase):
    def corpus(self):
        hang = "Misaligned data, model, and training graph"
        oom = "Constrained resource and inefficient utilization"
        recs = [issue(i, "tune", ["zebrastall in allgather"], "4.11", hang, 4) for i in TUNE_IDS[:3]]
        recs += [issue(i, "tune", ["plain failure text"], "4.2", oom, 4) for i in TUNE_IDS[3:]]
        # A word only the test split holds, labelled strongly: it must never be learned.
        recs += [issue(i, "test", ["testonlyword in allgather"], "4.2", oom, 4) for i in TEST_IDS]
        return recs

    def test_a_word_only_the_test_split_holds_is_never_learned(self):
        text = learn(self.corpus())
        self.assertNotIn("testonlyword", text)
        self.assertIn("9 tune issues", text)

    def test_a_word_of_three_hang_issues_points_at_the_hang_and_its_cause(self):
        text = learn(self.corpus())
        block = text.split("  - id: learned-zebrastall\n")[1].split("  - id:")[0]
        self.assertIn("symptoms: {\"4.11\": ", block)
        self.assertIn("root_cause: {\"R4.6\": ", block)
        self.assertIn("fallback: true", block)
        self.assertIn("regex: '\\bzebrastall\\b'", block)

    def test_a_word_below_the_minimum_issue_count_is_left_out(self):
        self.assertNotIn("zebrastall", learn(self.corpus(), "--min-df", "4"))

    def test_a_test_record_marked_tune_by_hand_is_still_skipped(self):
        recs = self.corpus()
        for r in recs:
            if r["id"] in TEST_IDS:
                r["split"] = "tune"  # the split field lies; the hash rule decides
        self.assertNotIn("testonlyword", learn(recs))

    def test_the_same_corpus_gives_the_same_file(self):
        self.assertEqual(learn(self.corpus()), learn(self.corpus()))

    def test_words_of_a_traceback_path_or_url_are_path_only(self):
        """Stop 49 (round 5): learn_ranker.py --path-share-max reads which words occur only in
        paths; a word also written outside a path (`python3 train.py`) is not path-only."""
        sys.path.insert(0, str(SCRIPT.parent))
        from learn_tokens import path_only_tokens
        got = path_only_tokens([
            '  File "/opt/conda/envs/myenv/lib/python3.10/site-packages/torch/utils/data.py", '
            'line 7, in fetch',
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:12",
            "see https://github.com/deepspeedai/DeepSpeed/issues/12",
            "python3 train.py --deepspeed"])
        self.assertTrue({"envs", "myenv", "utils", "csrc", "c10d", "github", "https"} <= got, got)
        self.assertFalse({"python3", "train", "deepspeed", "runtimeerror", "nccl", "fetch"} & got)

    def test_the_word_model_reads_the_parts_of_compound_identifiers(self):
        """Stop 70: word_tokens() adds the parts of an identifier split at '_' and at case steps,
        kept as tokens() keeps a word; data/word_tokens.txt, which ranker_words_test.cpp reads
        the binary against, holds what it gives."""
        sys.path.insert(0, str(SCRIPT.parent))
        from learn_tokens import tokens, word_tokens
        got = word_tokens(["ZeroInitContext in _ddp_init_helper of HTTPServer_v2"])
        self.assertTrue({"zeroinitcontext", "zero", "init", "context", "ddp_init_helper", "ddp",
                         "helper", "httpserver_v2", "http", "server"} <= got, got)
        self.assertFalse({"v2", "of", "in"} & got, got)  # too short
        got = word_tokens(["_setup_for_real_optimizer"])
        self.assertTrue({"setup", "real", "optimizer"} <= got, got)
        self.assertNotIn("for", got)  # a stop word
        self.assertEqual(tokens(["plain words only"]), word_tokens(["plain words only"]))
        data = REPO / "tests" / "triage" / "data" / "word_tokens.txt"
        rows = [ln.split("\t") for ln in data.read_text(encoding="utf-8").splitlines()
                if not ln.startswith("#")]
        self.assertEqual(len(rows), 10)
        for text, want in rows:
            self.assertEqual(" ".join(sorted(word_tokens([text]))), want, text)

    def test_without_out_or_cv_it_says_what_is_missing(self):
        got = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
        self.assertEqual(got.returncode, 2)
        self.assertIn("--out FILE is required (or --cv K)", got.stderr)


if __name__ == "__main__":
    unittest.main()
