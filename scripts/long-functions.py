"""Lists the Rust functions longer than a bound (70 lines by default), longest first.

    python3 scripts/long-functions.py                 # every crate's src/, bound 70
    python3 scripts/long-functions.py server --max 100
    python3 scripts/long-functions.py --count         # only how many

A function's length is from its `fn` line to its closing brace. Comments, strings and char
literals are blanked first (with import-cycles.py's `strip`), so braces inside them do not
count; test modules count like any code. Standard library only; it prints, always exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
_spec = importlib.util.spec_from_file_location("import_cycles", os.path.join(HERE, "import-cycles.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
strip = _mod.strip

FN_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def functions(text: str):
    """(name, first line, line count) of every function with a body in `text`."""
    s = strip(text)
    for m in FN_RE.finditer(s):
        i, depth = m.end(), 0
        # the body's `{` (a `;` first: a declaration without a body)
        while i < len(s) and s[i] not in "{;":
            i += 1
        if i >= len(s) or s[i] == ";":
            continue
        j = i
        while j < len(s):
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        first = s.count("\n", 0, m.start()) + 1
        if s[m.start()] == "\n":
            first += 1
        last = s.count("\n", 0, j) + 1
        yield m.group(1), first, last - first + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("crates", nargs="*", default=["proto", "storage", "server", "compare"])
    ap.add_argument("--max", type=int, default=70)
    ap.add_argument("--count", action="store_true")
    a = ap.parse_args()
    rows = []
    for crate in a.crates:
        for d, _, files in os.walk(os.path.join(ROOT, crate, "src")):
            for f in files:
                if f.endswith(".rs"):
                    p = os.path.join(d, f)
                    with open(p, encoding="utf-8") as fh:
                        for name, line, n in functions(fh.read()):
                            if n > a.max:
                                rows.append((n, os.path.relpath(p, ROOT), line, name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    if not a.count:
        for n, p, line, name in rows:
            print(f"{n:5} {p}:{line} {name}")
    print(f"{len(rows)} functions over {a.max} lines")


if __name__ == "__main__":
    main()
