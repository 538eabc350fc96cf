#!/usr/bin/python3
"""Tests of harness/triage/learn_neighbours.py (stop 53): the file it writes (tune issues only,
labels and distinct words, no line), the similarities the binary must give on a fixture, and that
learn_ranker.py's --cv writes each fold's file from that fold's training issues only."""
import json
import pathlib
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness" / "triage"))
import learn_neighbours  # noqa: E402
import learn_ranker  # noqa: E402

DATA = REPO / "tests" / "triage" / "data"
HANG = "R4.6"
SERVE = "R5.2"
# Ids the split rule puts in tune (learn_words_test.py's), and one it puts in test.
TUNE = [f"pytorch/pytorch#{n}" for n in (900004, 900006, 900008, 900012, 900013, 900016)]
TEST_ID = "deepspeedai/DeepSpeed#4"
# The texts the fixture's similarities are given for (three lines each at most).
TEXTS = ["RuntimeError: quuxhang in allreduce after the watchdog timeout",
         "quuxserve engine crash while serving the quuxhang model",
         "nothing the file holds"]


def issue(iid, symptoms, rc, stage, lines):
    return {"id": iid, "url": "https://github.com/pytorch/pytorch/issues/" + iid.split("#")[1],
            "split": "tune", "framework": "pytorch", "error_lines": list(lines), "env_lines": [],
            "summary": f"summary of {iid}", "symptoms": symptoms, "root_cause": "x",
            "stage": stage, "fix_pattern": None, "fix": None, "_rc": rc}


def corpus():
    """Two quuxhang hangs, a NaN, a serving crash, a build failure and a non-failure question."""
    return [
        issue(TUNE[0], ["4.11", "4.7"], HANG, 4,
              ["RuntimeError: quuxhang in allreduce", "watchdog timeout after 1800000 ms"]),
        issue(TUNE[1], ["4.11"], HANG, 4, ["quuxhang allreduce stuck on rank 3"]),
        issue(TUNE[2], ["4.3"], None, 4, ["loss is nan after quuxnan overflow"]),
        issue(TUNE[3], ["5.1"], SERVE, 5, ["quuxserve engine crash in the scheduler"]),
        issue(TUNE[4], ["3.1"], None, 3, ["nvcc fails to compile quuxbuild"]),
        issue(TUNE[5], ["none"], None, 0, ["a question about quuxhang docs"]),
        issue(TEST_ID, ["4.11"], HANG, 4, ["quuxhang in the test split"]),
    ]


def similarity_lines(path):
    """`text<TAB>measure<TAB>id<TAB>similarity` for each text and measure, best first."""
    rows = learn_neighbours.read_neighbours(path)
    out = []
    for text in TEXTS:
        for measure in ("cosine", "bm25"):
            got = learn_neighbours.similarities(rows, learn_neighbours.query_tokens(text),
                                                measure == "bm25")
            out += [f"{text}\t{measure}\t{r['id']}\t{s:.12f}" for s, r in got]
    return out


class LearnNeighboursTest(unittest.TestCase):
    def test_the_fixture_is_what_the_learner_writes_without_the_test_split(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp, "neighbours.jsonl")
            self.assertEqual(learn_neighbours.write_neighbours(corpus(), out), 6)
            text = out.read_text(encoding="utf-8")
        self.assertEqual(text, (DATA / "neighbours.jsonl").read_text(encoding="utf-8"))
        rows = [json.loads(line) for line in text.splitlines()]
        self.assertEqual(rows[0], {"format": "faultline-neighbours 1", "issues": 6, "tokens": 24})
        self.assertNotIn(TEST_ID, text)
        self.assertNotIn("RuntimeError: quuxhang", text)  # tokens only, never a line
        self.assertEqual(rows[1]["tokens"],
                         "allreduce quuxhang runtimeerror timeout watchdog")
        self.assertEqual((rows[1]["stage"], rows[1]["root_cause"]), (4, "R4.6"))
        self.assertEqual(rows[3]["root_cause"], "none")

    def test_the_fixture_similarities_are_the_ones_the_learner_gives(self):
        """data/neighbours_similarities.txt, which ranker_neighbours_test.cpp checks the binary
        against, holds what learn_neighbours.py computes on data/neighbours.jsonl."""
        want = (DATA / "neighbours_similarities.txt").read_text(encoding="utf-8").splitlines()
        self.assertEqual(similarity_lines(DATA / "neighbours.jsonl"), want)
        # N 6; idf(quuxhang, df 3) = ln(7/4) + 1, idf(allreduce, df 2) = ln(7/3) + 1; the first
        # text's words allreduce, quuxhang, runtimeerror, timeout, watchdog are all of issue 1.
        self.assertIn(f"{TEXTS[0]}\tcosine\t{TUNE[0]}\t1.000000000000", want)
        self.assertFalse(any(line.startswith(TEXTS[2]) for line in want))

    def test_each_cv_fold_writes_the_file_from_its_training_issues_only(self):
        train, held = corpus()[:3], corpus()[3:6]
        with tempfile.TemporaryDirectory() as tmp:
            learn_ranker.ranker_copy(pathlib.Path(tmp, "r"), train, [])
            ids = [r["id"] for r in learn_neighbours.read_neighbours(
                pathlib.Path(tmp, "r", "neighbours.jsonl"))]
        self.assertEqual(ids, [r["id"] for r in train])
        self.assertFalse(set(ids) & {r["id"] for r in held})


if __name__ == "__main__":
    if "--write-fixture" in sys.argv:  # regenerate data/ (then check the diff by hand)
        learn_neighbours.write_neighbours(corpus(), DATA / "neighbours.jsonl")
        (DATA / "neighbours_similarities.txt").write_text(
            "\n".join(similarity_lines(DATA / "neighbours.jsonl")) + "\n", encoding="utf-8")
        sys.exit(0)
    unittest.main()
