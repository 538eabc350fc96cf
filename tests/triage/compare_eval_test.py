#!/usr/bin/python3
"""Tests of harness/triage/compare_eval.py: it reads the `-v` lines `faultline triage --eval`
prints (the layout of eval.cpp's per-issue line) and counts answers gained and lost per issue."""
import importlib.util
import os
import pathlib
import subprocess
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "compare_eval", REPO / "harness" / "triage" / "compare_eval.py")
compare_eval = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(compare_eval)

BEFORE = """split dev: 4 issues with input lines (0 without any, skipped)
  deepspeedai/DeepSpeed#1          label 4.11       stage 4 R4.6  | got 4.11  stage 4 R4.6  ok
  deepspeedai/DeepSpeed#2          label 4.2        stage 4 R4.5  | got 4.3   stage 4 R4.6  top3
  NVIDIA/nccl#3                    label 2.1        stage 2 R2.1  | got none  stage 0 none  MISS
  pytorch/pytorch#4                label 5.1        stage 5 R5.1  | got 5.1   stage 5 R5.1  ok
"""
AFTER = """| top-1 symptom | 50.0% (2/4) [15-85] |
  deepspeedai/DeepSpeed#1          label 4.11       stage 4 R4.6  | got 4.7   stage 4 R4.6  top3
  deepspeedai/DeepSpeed#2          label 4.2        stage 4 R4.5  | got 4.2   stage 4 R4.5  ok
  NVIDIA/nccl#3                    label 2.1        stage 2 R2.1  | got 2.1   stage 2 R2.1  ok
  hpcaitech/ColossalAI#5           label 3.1        stage 3 R3.3  | got none  stage 0 none  MISS
"""


class Compare(unittest.TestCase):
    def test_reads_each_issue_line_and_nothing_else(self):
        self.assertEqual(compare_eval.outcomes(BEFORE), {
            "deepspeedai/DeepSpeed#1": "ok", "deepspeedai/DeepSpeed#2": "top3",
            "NVIDIA/nccl#3": "MISS", "pytorch/pytorch#4": "ok"})

    def test_counts_gains_and_losses_over_the_shared_issues_only(self):
        rows = compare_eval.compare(compare_eval.outcomes(BEFORE), compare_eval.outcomes(AFTER))
        (t1, b1, a1, g1, l1, n1), (t3, b3, a3, g3, l3, n3) = rows
        self.assertEqual((t1, b1, a1, n1), ("top-1", 1, 2, 3))
        self.assertEqual(g1, ["NVIDIA/nccl#3", "deepspeedai/DeepSpeed#2"])
        self.assertEqual(l1, ["deepspeedai/DeepSpeed#1"])
        self.assertEqual((t3, b3, a3, g3, l3), ("top-3", 2, 3, ["NVIDIA/nccl#3"], []))

    def test_sign_test(self):
        self.assertEqual(compare_eval.sign_test(0, 0), 1.0)
        self.assertAlmostEqual(compare_eval.sign_test(5, 1), 0.21875)
        self.assertAlmostEqual(compare_eval.sign_test(18, 3), 0.00149, places=5)

    @unittest.skipUnless(os.environ.get("FAULTLINE"), "FAULTLINE (the built binary) not set")
    def test_reads_what_the_binary_prints(self):
        # The binary's own `-v` lines, on the dev checker's fixture (two issues it cannot answer).
        out = subprocess.run(
            [os.environ["FAULTLINE"], "triage", "--eval",
             str(REPO / "tests" / "support" / "triage_dev_bad.jsonl"), "--split", "dev", "-v"],
            capture_output=True, text=True, check=False).stdout
        self.assertEqual(compare_eval.outcomes(out), {
            "deepspeedai/DeepSpeed#5394": "MISS", "deepspeedai/DeepSpeed#4": "MISS"})


if __name__ == "__main__":
    unittest.main()
