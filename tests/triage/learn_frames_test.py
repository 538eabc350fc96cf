#!/usr/bin/python3
"""Tests of harness/triage/learn_frames.py (stop 53): the frames it reads from real-looking lines
of each kind (tests/triage/data/frames_fixture.txt, which ranker_frames_test.cpp checks the binary
against too), and frames.yaml as learn_ranker.py writes it from the tune split only."""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness" / "triage"))
import learn_frames  # noqa: E402

SCRIPT = REPO / "harness" / "triage" / "learn_ranker.py"
FIXTURE = REPO / "tests" / "triage" / "data" / "frames_fixture.txt"
# Ids the split rule (sha1 mod 5) puts in test (the first) and in tune (the others).
TEST_ID = "pytorch/pytorch#900000"
TUNE_IDS = [f"pytorch/pytorch#{n}" for n in (900004, 900006, 900008, 900012, 900013, 900016)]
CAUSE = "Misaligned data, model, and training graph"


def fixture():
    lines = [ln for ln in FIXTURE.read_text(encoding="utf-8").splitlines()
             if not ln.startswith("#")]
    return [(a[len("in: "):], b[len("out:"):].strip()) for a, b in zip(lines[::2], lines[1::2])]


def issue(iid, stage, lines, symptoms=None):
    return {"id": iid, "url": "https://github.com/pytorch/pytorch/issues/" + iid.split("#")[1],
            "split": "test" if iid == TEST_ID else "tune", "framework": "pytorch",
            "error_lines": list(lines), "env_lines": [], "summary": "s",
            "symptoms": symptoms or ([f"{stage}.1"] if stage else ["none"]), "root_cause": CAUSE,
            "stage": stage, "fix_pattern": None, "fix": None}


ENGINE = '  File "/x/site-packages/deepspeed/runtime/engine.py", line 9, in train_batch'
HF = '  File "/x/site-packages/transformers/modeling_utils.py", line 3, in from_pretrained'


class LearnFramesTest(unittest.TestCase):
    def test_each_kind_of_line_gives_the_fixture_tokens(self):
        cases = fixture()
        self.assertGreaterEqual(len(cases), 15)
        for line, want in cases:
            with self.subTest(line=line):
                self.assertEqual(" ".join(learn_frames.line_tokens(line)), want)

    def test_a_python_path_is_masked_to_its_package_module(self):
        self.assertEqual(learn_frames.module_of(
            "/home/u/envs/a/lib/python3.10/site-packages/deepspeed/runtime/engine.py"),
            "deepspeed.runtime.engine")
        self.assertEqual(learn_frames.module_of("/src/DeepSpeed/deepspeed/__init__.py"), "deepspeed")
        self.assertEqual(learn_frames.module_of("/home/me/project/train.py"), "train")
        self.assertEqual(learn_frames.module_of("torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"),
                         "processgroupnccl")

    def test_frames_yaml_counts_tune_failures_per_stage_and_never_reads_test(self):
        recs = [issue(TUNE_IDS[0], 4, [ENGINE]), issue(TUNE_IDS[1], 4, [ENGINE, HF]),
                issue(TUNE_IDS[2], 3, [HF]), issue(TUNE_IDS[3], 3, [HF, "no frame here"]),
                issue(TUNE_IDS[4], 0, [HF]),  # a non-failure: not counted
                issue(TUNE_IDS[5], 5, ["plain words only"]),
                issue(TEST_ID, 5, [HF, ENGINE])]  # test: never read
        with tempfile.TemporaryDirectory() as tmp:
            corpus = pathlib.Path(tmp, "c.jsonl")
            corpus.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
            out = pathlib.Path(tmp, "priors.yaml")
            subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(corpus), "--out",
                            str(out)], check=True, capture_output=True, text=True)
            text = pathlib.Path(tmp, "frames.yaml").read_text(encoding="utf-8")
        self.assertIn("issues: 4\n", text)
        self.assertIn('stages: {"3": 2, "4": 2}\n', text)
        self.assertIn('  "from_pretrained": {"3": 2, "4": 1}\n', text)
        self.assertIn('  "deepspeed.runtime.engine:train_batch": {"4": 2}\n', text)
        self.assertIn('  "transformers.modeling_utils:from_pretrained": {"3": 2, "4": 1}\n', text)
        self.assertNotIn('"5"', text)


if __name__ == "__main__":
    unittest.main()
