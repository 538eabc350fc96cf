#!/usr/bin/python3
"""Tests of harness/triage/learn_words.py (stop 52): the word model's variants, the logistic
regression words.yaml can ship, and the posteriors the binary must give on a fixture."""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness" / "triage"))
import learn_words  # noqa: E402

SCRIPT = REPO / "harness" / "triage" / "learn_ranker.py"
DATA = REPO / "tests" / "triage" / "data"
TUNE_IDS = [f"pytorch/pytorch#{n}" for n in (900004, 900006, 900008, 900012, 900013, 900016,
                                             900018, 900019, 900020)]
HANG = "Misaligned data, model, and training graph"
SERVE = "Faulty inference logic and framework limitation"


def issue(iid, symptoms, cause, stage, lines):
    return {"id": iid, "url": "https://github.com/pytorch/pytorch/issues/" + iid.split("#")[1],
            "split": "tune", "framework": "pytorch", "error_lines": list(lines), "env_lines": [],
            "summary": "s", "symptoms": symptoms, "root_cause": cause, "stage": stage,
            "fix_pattern": None, "fix": None}


def corpus():
    """Six stage-4 hangs, three of them with 'quuxhang'; three stage-5 failures with 'quuxserve'."""
    recs = [issue(i, ["4.11"], HANG, 4, ["plain quuxhang" if n < 3 else "plain loss"])
            for n, i in enumerate(TUNE_IDS[:6])]
    recs += [issue(i, ["5.1"], SERVE, 5, ["plain quuxserve"]) for i in TUNE_IDS[6:]]
    return recs


def rare_corpus():
    """Five stage-4 hangs with 'quuxhang' (two of them also 'quuxodd'), three stage-5 failures
    with 'quuxserve', all with 'plain'."""
    recs = [issue(i, ["4.11"], HANG, 4, ["plain quuxhang" + (" quuxodd" if n < 2 else "")])
            for n, i in enumerate(TUNE_IDS[:5])]
    recs += [issue(i, ["5.1"], SERVE, 5, ["plain quuxserve"]) for i in TUNE_IDS[5:8]]
    return recs


class LearnWordsTest(unittest.TestCase):
    def test_the_fixture_posteriors_are_the_ones_learn_words_gives(self):
        """data/words_logistic_posteriors.txt, which ranker_words_test.cpp checks the binary
        against, holds what learn_words.py computes on data/words_logistic.yaml."""
        model = learn_words.read_words(DATA / "words_logistic.yaml")
        want = (DATA / "words_logistic_posteriors.txt").read_text(encoding="utf-8").splitlines()
        texts = list(dict.fromkeys(line.split("\t")[0] for line in want))
        self.assertEqual(learn_words.posterior_lines(model, texts), want)
        # stage 4: the mean of the weights' softmax(0.25 + 1.5, -0.25 - 1.5) = 0.970687769249
        # and the naive Bayes's 0.868632707775 (add-1 over 3 words: 4/6 * 3/7 * 3/7 against
        # 2/6 * 1/6 * 2/6)
        self.assertIn("RuntimeError: quuxhang in quuxplain\tstages\t4\t0.919660238512", want)

    def test_the_regression_learns_the_words_of_each_stage(self):
        docs = [(learn_words.words_of(r), dict(r, _rc=None)) for r in corpus()]
        fit = learn_words.lr_fit(docs, "stages", 1.0)
        self.assertEqual(fit["labels"], ["4", "5"])
        self.assertGreater(fit["weights"]["quuxserve"][1], 0.5)
        self.assertLess(fit["weights"]["quuxhang"][1], 0)
        post = learn_words.lr_posterior(fit, {"quuxserve"})
        self.assertGreater(post["5"], 0.7)
        # a stronger penalty: smaller weights
        weak = learn_words.lr_fit(docs, "stages", 10.0)
        self.assertLess(weak["weights"]["quuxserve"][1], fit["weights"]["quuxserve"][1])

    def test_the_written_regression_scores_as_the_fitted_one(self):
        """learn_ranker.py --logistic writes the weights into words.yaml; read back, the file
        gives the mean of the fitted regression's and the counts' posteriors (the file is what
        the binary scores)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "c.jsonl")
            path.write_text("".join(json.dumps(r) + "\n" for r in corpus()), encoding="utf-8")
            subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(path), "--out",
                            str(pathlib.Path(tmp, "priors.yaml")), "--logistic",
                            "stages=1,symptoms=2"], check=True, capture_output=True, text=True)
            model = learn_words.read_words(pathlib.Path(tmp, "words.yaml"))
        self.assertEqual(sorted(model["logistic_bias"]), ["stages", "symptoms"])
        docs = [(learn_words.words_of(r), dict(r, _rc=None)) for r in corpus()]
        for kind, lam in (("stages", 1.0), ("symptoms", 2.0)):
            fit = learn_words.lr_fit(docs, kind, lam)
            for words in ({"quuxserve"}, {"quuxhang", "plain"}, set()):
                got = learn_words.word_posterior(model, kind, words)
                want = learn_words.mean_posterior(
                    learn_words.lr_posterior(fit, words),
                    learn_words.softmax(learn_words.nb_scores(model, kind, words)))
                self.assertEqual(set(got), set(want))
                for lab in want:
                    self.assertAlmostEqual(got[lab], want[lab], places=12)

    def test_variants_are_measured_against_the_shipped_model_on_the_same_folds(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "c.jsonl")
            path.write_text("".join(json.dumps(r) + "\n" for r in corpus()), encoding="utf-8")
            out = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(path),
                                  "--cv-words", "3", "--variant", "hier,lr", "--label-text", "none"],
                                 check=True,
                                 capture_output=True, text=True).stdout
        self.assertIn("variant nb, 3-fold CV: stage ", out)
        self.assertRegex(out, r"variant lr, 3-fold CV: stage [0-9.]+% \(\d+/9\) \+\d+/-\d+")
        self.assertEqual(out.count("inner CV chose"), 3)  # lr's penalty, per outer fold


class MixCostTest(unittest.TestCase):
    """Stop 53: the mix's posteriors sharpened (nb_mix_power), its weights cut (--prune,
    --weight-min-df) and its fits kept (--lr-cache)."""

    def test_the_sharpened_fixture_posteriors_are_the_ones_learn_words_gives(self):
        """data/words_logistic_posteriors_power2.txt, which ranker_words_test.cpp checks the
        binary's nb_mix_power 2 against: the mixed kinds squared and normalised, root causes
        (counts alone) as they were."""
        model = learn_words.read_words(DATA / "words_logistic.yaml")
        want = (DATA / "words_logistic_posteriors_power2.txt").read_text(
            encoding="utf-8").splitlines()
        texts = list(dict.fromkeys(line.split("\t")[0] for line in want))
        self.assertEqual(learn_words.posterior_lines(model, texts, power=2.0), want)
        plain = learn_words.posterior_lines(model, texts)
        self.assertEqual([x for x in want if "\troot_causes\t" in x],
                         [x for x in plain if "\troot_causes\t" in x])
        # stage 4 of the first text: 0.919660238512 squared against 0.080339761488 squared
        self.assertIn("RuntimeError: quuxhang in quuxplain\tstages\t4\t0.992426361920", want)

    def test_weights_of_rare_words_and_small_weights_are_cut(self):
        docs = [(learn_words.words_of(r), dict(r, _rc=None)) for r in rare_corpus()]
        full = learn_words.lr_fit(docs, "stages", 1.0)
        try:
            learn_words.WEIGHT_MIN_DF = 4  # quuxodd: 2 failures, quuxserve 3, quuxhang 5
            rare = learn_words.lr_fit(docs, "stages", 1.0)
            learn_words.WEIGHT_MIN_DF, learn_words.PRUNE = 2, 0.5
            small = learn_words.lr_fit(docs, "stages", 1.0)
        finally:
            learn_words.WEIGHT_MIN_DF, learn_words.PRUNE = 2, 0.0
        for w in ("quuxodd", "quuxserve", "quuxhang"):
            self.assertTrue(any(full["weights"][w]), w)
        self.assertEqual(rare["weights"]["quuxodd"], [0.0, 0.0])
        self.assertEqual(rare["weights"]["quuxserve"], [0.0, 0.0])
        self.assertEqual(rare["weights"]["quuxhang"], full["weights"]["quuxhang"])
        self.assertEqual(rare["bias"], full["bias"])
        self.assertTrue(any(abs(x) < 0.5 for row in full["weights"].values() for x in row if x))
        for w, row in small["weights"].items():
            for x, y in zip(row, full["weights"][w]):
                self.assertEqual(x, y if abs(y) >= 0.5 else 0.0)

    def test_the_written_file_keeps_only_the_weights_of_words_of_n_failures(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "c.jsonl")
            path.write_text("".join(json.dumps(r) + "\n" for r in rare_corpus()),
                            encoding="utf-8")
            for cut, kept in (("2", ["quuxhang", "quuxodd", "quuxserve"]), ("3", ["quuxhang",
                              "quuxserve"]), ("4", ["quuxhang"])):
                subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(path), "--out",
                                str(pathlib.Path(tmp, "priors.yaml")), "--logistic",
                                "stages=1", "--weight-min-df", cut], check=True,
                               capture_output=True, text=True)
                model = learn_words.read_words(pathlib.Path(tmp, "words.yaml"))
                self.assertEqual(sorted(model["logistic_stages"]), kept)
                self.assertIn("quuxodd", model["word_stages"])  # the counts keep every word

    def test_a_cached_fit_is_read_back_not_fitted_again(self):
        docs = [(learn_words.words_of(r), dict(r, _rc=None)) for r in corpus()]
        fresh = learn_words.lr_fit(docs, "symptoms", 1.0)
        raw = learn_words.lr_raw_fit
        with tempfile.TemporaryDirectory() as tmp:
            try:
                learn_words.LR_CACHE = tmp
                first = learn_words.lr_fit(docs, "symptoms", 1.0)
                learn_words.lr_raw_fit = None  # a second fit would fail
                again = learn_words.lr_fit(docs, "symptoms", 1.0)
                self.assertEqual(len(list(pathlib.Path(tmp).glob("*.json"))), 1)
                with self.assertRaises(TypeError):  # another penalty: not the cached fit
                    learn_words.lr_fit(docs, "symptoms", 2.0)
            finally:
                learn_words.LR_CACHE, learn_words.lr_raw_fit = None, raw
        self.assertEqual(first, fresh)
        self.assertEqual(again, fresh)


if __name__ == "__main__":
    unittest.main()
