#!/usr/bin/python3
"""Tests of harness/triage/mechanism_matrix.py's adaptations: the --set values it runs are the ones
triage's draft would write (draft.cpp), so a row it reports is a draft triage can make."""
import importlib.util
import pathlib
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "mechanism_matrix", REPO / "harness" / "triage" / "mechanism_matrix.py")
matrix = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(matrix)


class Overrides(unittest.TestCase):
    def test_offload_only_beside_a_zero_stage(self):
        # The draft leaves the offload out when it keeps ZeRO stage 0 (the workers refuse it).
        self.assertIsNone(matrix.overrides("offload", {"topology.zero": "0"}))
        self.assertIsNone(matrix.overrides("offload", {}))
        self.assertEqual(matrix.overrides("offload", {"topology.zero": "2"}),
                         ["workload.zero.offload_optimizer=true"])
        self.assertIsNone(matrix.overrides(
            "offload", {"topology.zero": "1", "workload.zero.offload_optimizer": "true"}))
        # and no stage 0 for a base that offloads (the draft keeps its stage).
        self.assertIsNone(matrix.overrides(
            "zero0", {"topology.zero": "2", "workload.zero.offload_optimizer": "true"}))
        self.assertEqual(matrix.overrides("zero0", {"topology.zero": "2"}), ["topology.zero=0"])

    def test_layout_recomputes_dp_and_skips_what_does_not_divide(self):
        base = {"topology.ranks": "2", "topology.tp": "1", "topology.pp": "1"}
        self.assertEqual(matrix.overrides("ranks4", base), ["topology.ranks=4", "topology.dp=4"])
        self.assertEqual(matrix.overrides("pp2", base),
                         ["topology.tp=1", "topology.pp=2", "topology.dp=1"])
        self.assertIsNone(matrix.overrides("pp2", dict(base, **{"topology.ranks": "3"})))
        self.assertEqual(matrix.overrides("mpirun", dict(base, **{"topology.launcher": "auto"})),
                         ["topology.launcher=mpirun"])


class Combinations(unittest.TestCase):
    def test_each_part_applies_to_the_scenario_the_one_before_left(self):
        base = {"topology.ranks": "2", "topology.tp": "1", "topology.pp": "1", "topology.zero": "0"}
        # 8 ranks, then tp 2 of them: dp 4, not dp 1 (tp 2 on the base's 2 ranks).
        self.assertEqual(matrix.overrides("ranks8+tp2", base),
                         ["topology.ranks=8", "topology.tp=2", "topology.pp=1", "topology.dp=4"])
        # the offload needs a ZeRO stage: after zero3 it applies, alone on stage 0 it does not.
        self.assertIsNone(matrix.overrides("offload", base))
        self.assertEqual(matrix.overrides("zero3+offload", base),
                         ["topology.zero=3", "workload.zero.offload_optimizer=true"])
        # a part that changes nothing there makes no combination.
        self.assertIsNone(matrix.overrides("ranks8+ranks4", base))
        self.assertIsNone(matrix.overrides("zero0+bf16", base))


class Kept(unittest.TestCase):
    def test_a_layout_is_kept_when_any_key_it_changes_is_needed(self):
        # draft.cpp leaves a layout out when it changes any needed key: pp 2 also changes dp.
        sets = matrix.overrides("pp2", {"topology.ranks": "4", "topology.dp": "4"})
        self.assertEqual(matrix.needed_key(sets, ["topology.ranks", "topology.dp"]), "topology.dp")
        self.assertEqual(matrix.needed_key(sets, ["topology.pp"]), "topology.pp")
        # ranks 4 holds tp and pp: a base that needs only its tp takes it (stop 50).
        ranks = matrix.overrides("ranks4", {"topology.ranks": "2", "topology.dp": "2"})
        self.assertEqual(matrix.needed_key(ranks, ["topology.tp", "topology.pp"]), "")
        self.assertEqual(matrix.needed_key(["topology.launcher=mpirun"], ["topology.launcher"]),
                         "topology.launcher")
        # tp 2 writes pp 1 beside it: a needed pp that keeps the base's value is not changed.
        base = {"topology.ranks": "2", "topology.dp": "2", "topology.pp": "1"}
        tp = matrix.overrides("tp2", base)
        self.assertEqual(matrix.needed_key(tp, ["topology.pp"], base), "")
        self.assertEqual(matrix.needed_key(tp, ["topology.pp", "topology.tp"], base), "topology.tp")


if __name__ == "__main__":
    unittest.main()
