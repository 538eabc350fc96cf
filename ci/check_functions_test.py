#!/usr/bin/env python3
"""Tests of ci/check_functions.py on synthetic source trees (run by ctest: Functions.*)."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECKER = pathlib.Path(__file__).resolve().parent / "check_functions.py"


def body(n: int, line: str = "  x += 1;") -> str:
    return "\n".join([line] * n)


class CheckFunctions(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        (self.root / "harness").mkdir()
        (self.root / "ci").mkdir()
        self.allow = self.root / "ci" / "long_functions.txt"
        self.allow.write_text("# FILE FUNCTION LINES\n")

    def tearDown(self):
        self.tmp.cleanup()

    def source(self, text: str, name: str = "harness/a.cpp") -> None:
        (self.root / name).write_text(text)

    def check(self, *extra: str):
        r = subprocess.run([sys.executable, str(CHECKER), "--root", str(self.root), *extra],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr

    def test_a_function_of_81_lines_fails_with_file_line_and_length(self):
        self.source("namespace a {\n\nint f(int x) {\n" + body(81) + "\n}\n\n}  // namespace a\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("harness/a.cpp:3: f: body of 81 lines (at most 80; split it, or make it a "
                      "table)", out)

    def test_a_function_of_80_lines_passes(self):
        self.source("int f(int x) {\n" + body(80) + "\n}\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("no function body over 80 lines outside tables but the 0", out)

    def test_braces_in_strings_chars_comments_and_raw_strings_do_not_count(self):
        tricky = ('  s = "{{{"; c = \'}\'; d = \'{\';  // }}}\n'
                  '  /* { */ r = R"x(}"})x"; q = "\\"}"; n = 1\'000;\n')
        self.source("#define OPEN {\nvoid g() {\n" + tricky + body(79) + "\n}\n"
                    "void h() {\n" + body(81) + "\n}\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("harness/a.cpp:2: g: body of 81 lines", out)
        self.assertIn("harness/a.cpp:85: h: body of 81 lines", out)

    def test_member_functions_constructors_lambdas_and_tests_are_found(self):
        self.source("struct alignas(8) S {\n  int v{0};\n  void m() const {\n" + body(81) + "\n  }\n};\n"
                    "S::S(int a, Opt o = Opt{}) : v_{a}, w_(a) {\n" + body(81) + "\n}\n"
                    "const auto kHandler = register_kind(\"x\", [](int y) {\n" + body(81) + "\n});\n"
                    "TEST(Suite, NameReadsAsASentence) {\n" + body(81) + "\n}\n")
        rc, out = self.check("--list")
        self.assertEqual(out.split("\n")[:4],
                         ["harness/a.cpp S::S 81", "harness/a.cpp TEST(Suite,NameReadsAsASentence) 81",
                          "harness/a.cpp kHandler(lambda) 81", "harness/a.cpp m 81"])

    def test_a_table_is_excepted_but_control_flow_is_not(self):
        rows = "\n".join(f'      {{"row{i}", {i}, "help"}},' for i in range(95))
        self.source("const std::vector<Row>& rows() {\n  static const std::vector<Row> v = {\n"
                    + rows + "\n  };\n  return v;\n}\n"
                    "int run() {\n  return go([&]() -> int {\n" + body(90) + "\n  });\n}\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertNotIn("rows", out)
        self.assertIn("run: body of 92 lines", out)

    def test_an_allowlisted_function_may_stay_but_not_grow(self):
        self.source("int f() {\n" + body(90) + "\n}\n")
        self.allow.write_text("harness/a.cpp f 90\n")
        self.assertEqual(self.check()[0], 0)
        self.source("int f() {\n" + body(91) + "\n}\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("harness/a.cpp:1: f: body grew to 91 lines (allowlist long_functions.txt: "
                      "90; it may only shrink)", out)

    def test_a_shrunk_or_fixed_function_makes_its_entry_stale_until_lowered(self):
        self.source("int f() {\n" + body(85) + "\n}\nint g() {\n" + body(10) + "\n}\n")
        self.allow.write_text("harness/a.cpp f 90\nharness/a.cpp g 100\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("harness/a.cpp f 90: stale, the function is 85 lines now: lower the entry "
                      "to 85", out)
        self.assertIn("harness/a.cpp g 100: stale, the function is no longer over 80 lines (or "
                      "gone): remove the entry", out)
        rc, out = self.check("--shrink")
        self.assertEqual(rc, 0, out)
        self.assertTrue(self.allow.read_text().endswith("\nharness/a.cpp f 85\n"))
        self.assertEqual(self.check()[0], 0)

    def test_shrink_never_adds_a_new_offender(self):
        self.source("int f() {\n" + body(85) + "\n}\n")
        rc, out = self.check("--shrink")
        self.assertEqual(rc, 1, out)
        self.assertNotIn("harness/a.cpp f", self.allow.read_text())

    def test_a_file_over_600_lines_is_only_a_warning(self):
        self.source("\n".join(f"int f{i}() {{ return {i}; }}" for i in range(601)) + "\n")
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("warning: harness/a.cpp: 601 lines (a file over 600 lines is usually two "
                      "files)", out)

    def test_braces_split_across_preprocessor_branches_are_an_error(self):
        self.source("#if A\nvoid f() {\n#else\nvoid f(int) {\n#endif\n  g();\n}\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("harness/a.cpp: its braces do not balance", out)

    def test_a_malformed_allowlist_line_is_an_error_naming_it(self):
        self.allow.write_text("harness/a.cpp f\n")
        rc, out = self.check()
        self.assertEqual(rc, 1, out)
        self.assertIn("long_functions.txt:1: expected FILE FUNCTION LINES, got 'harness/a.cpp f'",
                      out)


if __name__ == "__main__":
    unittest.main()
