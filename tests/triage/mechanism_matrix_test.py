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

    def test_layout_recomputes_dp_and_skips_what_does_not_divide(self):
        base = {"topology.ranks": "2", "topology.tp": "1", "topology.pp": "1"}
        self.assertEqual(matrix.overrides("ranks4", base), ["topology.ranks=4", "topology.dp=4"])
        self.assertEqual(matrix.overrides("pp2", base),
                         ["topology.tp=1", "topology.pp=2", "topology.dp=1"])
        self.assertIsNone(matrix.overrides("pp2", dict(base, **{"topology.ranks": "3"})))
        self.assertEqual(matrix.overrides("mpirun", dict(base, **{"topology.launcher": "auto"})),
                         ["topology.launcher=mpirun"])


if __name__ == "__main__":
    unittest.main()
