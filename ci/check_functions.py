#!/usr/bin/env python3
"""Function and file length: no function body over 80 lines, outside tables; no file over 600 lines.

A function body's length is the number of lines strictly between its opening and its closing
brace (blank and comment lines count: they are what a reader scrolls through). Every C++ source
of the project is read: base, injector, kernels, workloads, harness, bench and tests (a test of
120 lines is as hard to read as any other function; the tolerated ones are in the allowlist).

How a body is found: comments, string and character literals (raw strings included) and
preprocessor lines are blanked first, so a brace in them does not count; then braces are matched
on clang-formatted code. A '{' at namespace or class scope opens a function body when the text
before it (since the last ';', '{' or '}') is a declarator: it ends with ')' and optional
qualifiers (const, noexcept, override, final, mutable, a trailing return type), or with a
constructor's initializer list, or it is a lambda assigned at namespace scope (`auto f = [] {`).
Namespaces, extern "C" blocks, classes, structs and unions are looked into; enums and
initializers (`= {`) are data. Lambdas and local classes count as part of their function.

A table is a function whose body is mostly rows: at least three quarters of its body lines lie
inside braced initializer lists (a '{' after '=', '(', ',', 'return', a type name, or inside
another initializer). Tables are never offenders, whatever their length.

The allowlist (ci/long_functions.txt, `FILE FUNCTION LINES`) names today's offenders with their
length. The check fails when a function over 80 lines is not in it, is longer than it says, or
when an entry is stale (the function is shorter than listed or gone: lower or remove the line,
or run with --shrink, which only ever lowers and removes entries). So the list can only shrink.
A file over 600 lines is a warning.

Usage: ci/check_functions.py [--root DIR] [--allowlist FILE] [--shrink] [--list]
"""
import argparse
import pathlib
import re
import sys

MAX_BODY = 80
MAX_FILE = 600
TABLE_SHARE = 0.75
FOLDERS = ["base", "injector", "kernels", "workloads", "harness", "bench", "tests"]
SUFFIXES = {".cpp", ".hpp", ".cc", ".h", ".cu", ".cuh"}
RAW_PREFIX = re.compile(r'(?:^|[^A-Za-z0-9_])(?:u8|[uUL])?R"$')  # the text up to a raw string's '"'
QUALIFIERS = re.compile(
    r"\)\s*(?:const|volatile|noexcept(?:\s*\([^()]*\))?|override|final|mutable|constexpr|"
    r"&&|&|\s|->[^{;]*|requires[^{;]*|try)*$")
LAMBDA_END = re.compile(r"(?:^|[=(,])\s*\[[^\[\]]*\]\s*(?:\([^()]*\))?\s*(?:mutable\s*)?(?:->[^{;]*)?$")
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
CONTROL = {"if", "for", "while", "switch", "catch", "else", "do", "try"}


def blank(text: str) -> str:
    """`text` with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True

    def wipe(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == '"':
            if RAW_PREFIX.search(" " + text[max(0, i - 3):i + 1]):
                delim_end = text.find("(", i)
                delim = text[i + 1:delim_end]
                close = ")" + delim + '"'
                j = text.find(close, delim_end)
                j = n if j < 0 else j + len(close)
            else:
                j = i + 1
                while j < n and text[j] != '"' and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j += 1
            wipe(i + 1, j - 1)
            i = j
        elif c == "'":
            # A digit separator (1'000'000) when the token before it starts with a digit.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'."):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


class Function:
    def __init__(self, name: str, first: int, last: int, table: bool):
        self.name, self.first, self.last, self.table = name, first, last, table

    @property
    def lines(self) -> int:
        return max(0, self.last - self.first - 1)


def squash(header: str) -> str:
    return re.sub(r"\s+", " ", header).strip()


def top_level(h: str) -> str:
    """`h` without operator names and what is inside parentheses and angle brackets."""
    h = re.sub(r"operator\s*(?:\(\)|[^\s(]+)", "operator", h)
    while True:
        shorter = re.sub(r"\([^()]*\)|<[^<>()]*>", "", h)
        if shorter == h:
            return h
        h = shorter


def kind_of(header: str, prev: str) -> str:
    """What a '{' at namespace/class scope opens: scope, function or data."""
    h = squash(header)
    h = re.sub(r"^(?:(?:public|private|protected)\s*:\s*)+", "", h)
    if re.match(r"^(?:inline\s+)?namespace\b", h) or re.match(r'^extern "?\s*"?$', h) or h == "extern":
        return "scope"
    if LAMBDA_END.search(h):
        return "lambda"
    if h.count("(") > h.count(")"):
        return "data"  # an expression inside a declarator: a default argument `Options{}`
    if "=" in top_level(h):
        return "data"
    bare = re.sub(r"^template\s*<.*?>\s*|\balignas\s*\([^()]*\)", "", h)
    if re.match(r"^(?:\[\[[^\]]*\]\]\s*)?(?:class|struct|union)\b", bare) and "(" not in bare.split(":")[0]:
        return "scope"
    if re.match(r"^(?:typedef\s+)?enum\b", bare):
        return "data"
    if CTOR_INIT.search(h):
        # In a constructor's initializer list `a_{x}` initializes a member; the body's '{' follows
        # ')' or '}'.
        return "function" if prev in ")}" else "data"
    if QUALIFIERS.search(h) and "(" in h:
        first = re.match(r"^([A-Za-z_]\w*)", h)
        if first and first.group(1) in CONTROL:
            return "data"
        return "function"
    return "data"


def name_of(header: str) -> str:
    h = squash(header)
    h = re.sub(r"^(?:(?:public|private|protected)\s*:\s*)+", "", h)
    if LAMBDA_END.search(h):
        before = re.findall(r"([\w:]+)\s*=", h)
        return (before[0] if before else "lambda") + "(lambda)"
    m = re.search(r"operator\s*(\(\)|[^\s(]+)\s*\(", h)
    if m:
        start = h.rfind(" ", 0, m.start()) + 1
        return (h[start:m.start()] + "operator" + m.group(1)).replace(" ", "")
    depth = 0
    for i, c in enumerate(h):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth <= 0:
            words = re.findall(r"[~\w:<>, ]+$", h[:i].rstrip())
            name = re.sub(r"<[^<>]*>", "", words[0]).split()[-1] if words else "?"
            if re.fullmatch(r"[A-Z][A-Z0-9_]+", name):  # a macro: TEST(Suite, Name)
                close = h.find(")", i)
                return name + "(" + h[i + 1:close].replace(" ", "") + ")"
            return name
    return "?"


TRAILING_RETURN = re.compile(r"\)\s*(?:mutable\s*|noexcept\s*)*->\s*[\w:<>,\s*&]+$")
BLOCK_WORDS = CONTROL | {"mutable", "const", "noexcept", "override", "final"}


def body_is_table(body: str) -> bool:
    """Whether ≥ TABLE_SHARE of the body's lines lie inside braced initializer lists."""
    stack = []  # per open brace: is it an initializer
    starts = []
    covered = set()
    line = 0
    prev = ";"
    word = ""
    for off, c in enumerate(body):
        if c == "\n":
            line += 1
            continue
        if c.isspace():
            continue
        if c == "{":
            if stack and stack[-1]:
                init = True
            elif prev in "=(,[" or word == "return":
                init = True
            elif prev.isalnum() or prev in "_>":
                # `Row{`, `std::vector<int>{` are values; `else {`, `() -> int {` open blocks.
                init = word not in BLOCK_WORDS and not TRAILING_RETURN.search(body[max(0, off - 200):off])
            else:
                init = False  # after ')', ']', ';', '{', '}', ':' a block opens
            stack.append(init)
            starts.append(line)
        elif c == "}" and stack:
            init = stack.pop()
            first = starts.pop()
            if init and not (stack and stack[-1]):
                covered.update(range(first, line + 1))
        if c.isalnum() or c == "_":
            word = word + c if (prev.isalnum() or prev == "_") else c
        prev = c
    total = body.count("\n") - 1  # the lines strictly between the function's braces
    return total > 0 and len(covered - {0, line}) >= TABLE_SHARE * total


def functions(text: str) -> list:
    """Every function body at namespace or class scope in `text` (a C++ file)."""
    code = blank(text)
    found = []
    stack = []  # (kind, line, header before the brace, offset)
    header = []
    line = 1
    prev = ";"
    for off, c in enumerate(code):
        inside = bool(stack) and stack[-1][0] not in ("scope", "data")
        if c == "\n":
            line += 1
            if not inside:
                header.append(" ")
            continue
        if c == "{":
            if inside:
                stack.append(("inner", line, "", off))
            else:
                h = "".join(header)
                stack.append((kind_of(h, prev), line, h, off))
                header = []
        elif c == "}":
            if stack:
                kind, first, h, start = stack.pop()
                if kind in ("function", "lambda"):
                    body = code[start + 1:off]
                    nlines = line - first - 1
                    table = nlines > MAX_BODY and body_is_table(body)
                    found.append(Function(name_of(h), first, line, table))
                if stack and stack[-1][0] not in ("scope", "data"):
                    pass  # still inside a body
                elif kind in ("data", "lambda"):
                    # `int x{0};`, `a_{x}` in an initializer list, a lambda passed at namespace
                    # scope: the declaration goes on until its ';' or its body.
                    header = list(h) + ["{}"]
                else:
                    header = []
        elif c == ";" and not inside:
            header = []
        elif not inside:
            header.append(c)
        if not c.isspace():
            prev = c
    return found


def scan(root: pathlib.Path):
    """(offenders {(file, name): (lines, first line)}, long files [(file, lines)], unreadable)."""
    offenders = {}
    long_files = []
    unreadable = []  # files whose braces do not balance once literals are blanked
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            rel = str(path.relative_to(root))
            nlines = text.count("\n")
            if nlines > MAX_FILE:
                long_files.append((rel, nlines))
            code = blank(text)
            if code.count("{") != code.count("}"):
                unreadable.append(rel)
                continue
            seen = {}
            for f in functions(text):
                seen[f.name] = seen.get(f.name, 0) + 1
                name = f.name if seen[f.name] == 1 else f"{f.name}#{seen[f.name]}"
                if f.lines > MAX_BODY and not f.table:
                    offenders[(rel, name)] = (f.lines, f.first)
    return offenders, long_files, unreadable


def read_allowlist(path: pathlib.Path) -> dict:
    allowed = {}
    if not path.exists():
        return allowed
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        parts = [] if raw.lstrip().startswith("#") else raw.split()
        if not parts:
            continue
        if len(parts) != 3 or not parts[2].isdigit():
            raise SystemExit(f"{path}:{n}: expected FILE FUNCTION LINES, got {raw!r}")
        allowed[(parts[0], parts[1])] = int(parts[2])
    return allowed


HEADER = """\
# Functions over 80 lines tolerated today (ci/check_functions.py): FILE FUNCTION BODY_LINES.
# An entry may only be lowered or removed; a new function over 80 lines is refused. Fix the
# function, then lower its line (or run `ci/check_functions.py --shrink`).
"""


def write_allowlist(path: pathlib.Path, entries: dict) -> None:
    rows = sorted(entries.items())
    path.write_text(HEADER + "".join(f"{f} {n} {lines}\n" for (f, n), lines in rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--allowlist", default=None, help="default: ROOT/ci/long_functions.txt")
    ap.add_argument("--shrink", action="store_true",
                    help="lower or remove stale entries of the allowlist (never adds or raises)")
    ap.add_argument("--list", action="store_true", help="print every offender and exit 0")
    args = ap.parse_args()
    root = pathlib.Path(args.root).resolve()
    allow_path = pathlib.Path(args.allowlist or root / "ci" / "long_functions.txt")
    offenders, long_files, unreadable = scan(root)
    if args.list:
        for (f, n), (lines, _) in sorted(offenders.items(), key=lambda kv: (-kv[1][0], kv[0])):
            print(f"{f} {n} {lines}")
        return 0
    allowed = read_allowlist(allow_path)
    errors = [f"{f}: its braces do not balance once comments, literals and preprocessor lines are "
              f"blanked (braces split across #if branches?): it cannot be measured"
              for f in unreadable]
    for (f, n), (lines, first) in sorted(offenders.items()):
        if (f, n) not in allowed:
            errors.append(f"{f}:{first}: {n}: body of {lines} lines (at most {MAX_BODY}; "
                          f"split it, or make it a table)")
        elif lines > allowed[(f, n)]:
            errors.append(f"{f}:{first}: {n}: body grew to {lines} lines "
                          f"(allowlist {allow_path.name}: {allowed[(f, n)]}; it may only shrink)")
    stale = {}
    for (f, n), lines in sorted(allowed.items()):
        now = offenders.get((f, n), (0, 0))[0]
        if now < lines:
            stale[(f, n)] = now
            what = f"is {now} lines now: lower the entry to {now}" if now else \
                "is no longer over 80 lines (or gone): remove the entry"
            if not args.shrink:
                errors.append(f"{allow_path.name}: {f} {n} {lines}: stale, the function {what}")
    if args.shrink and stale:
        kept = {k: v for k, v in allowed.items() if stale.get(k, v)}
        kept.update({k: v for k, v in stale.items() if v})
        write_allowlist(allow_path, kept)
        print(f"check_functions: {len(stale)} allowlist entr(y/ies) lowered or removed")
    for f, lines in long_files:
        print(f"warning: {f}: {lines} lines (a file over {MAX_FILE} lines is usually two files)")
    for e in errors:
        print(e)
    tolerated = sum(1 for k in offenders if k in allowed)
    over = sum(v[0] - MAX_BODY for k, v in offenders.items() if k in allowed)
    if errors:
        print(f"check_functions: {len(errors)} problem(s); see the docstring of ci/check_functions.py")
        return 1
    print(f"check_functions: no function body over {MAX_BODY} lines outside tables but the "
          f"{tolerated} in {allow_path.name} ({over} lines over in all); "
          f"{len(long_files)} file(s) over {MAX_FILE} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
