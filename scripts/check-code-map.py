"""Checks that docs/architecture.md's code map names every module of the Rust crates.

    python3 scripts/check-code-map.py              # fails (exit 1) naming what is missing
    python3 scripts/check-code-map.py --self-test  # checks itself on a small map

Each crate's source files are looked for in its own section of the map (from the heading
that starts "### `<crate>/`" to the next "### "). A file counts as mapped when the section
names it in backticks by its path under `src/` (`http/batch.rs`), its file name
(`batch.rs`), or its module's name alone (`batch`, as in a list such as "one handler module
per resource (`buckets`, `records`)"); a folder module (`x/mod.rs`) by `x/`. The crate
roots (`lib.rs`, `main.rs`) and test files (`*_tests.rs`, `tests/`) are not asked for.
Standard library only.
"""

from __future__ import annotations

import os
import re
import sys

CRATES = ["proto", "storage", "server", "compare"]
TICKED = re.compile(r"`([^`\n]+)`")


def section(doc: str, crate: str) -> str | None:
    """The map's section of `crate`, or None when it has none."""
    m = re.search(r"^### `" + re.escape(crate) + r"/`.*$", doc, re.M)
    if not m:
        return None
    end = doc.find("\n### ", m.end())
    nxt = doc.find("\n## ", m.end())
    ends = [e for e in (end, nxt) if e >= 0]
    return doc[m.end(): min(ends) if ends else len(doc)]


def names(text: str) -> set[str]:
    """Every backticked token of `text`, and each part of a token that lists several
    (`a.rs, b.rs`, `x::y`)."""
    out = set()
    for t in TICKED.findall(text):
        out.add(t.strip())
        for part in re.split(r"[\s,()]+", t):
            if part:
                out.add(part)
                out.add(part.split("::")[-1])
    return out


def wanted(rel: str) -> list[str] | None:
    """The names that map the file at `rel` (under src/), or None for one not asked for."""
    parts = rel.split("/")
    base = parts[-1]
    if rel in ("lib.rs", "main.rs") or base.endswith("_tests.rs") or "tests" in parts[:-1]:
        return None
    if base == "mod.rs":
        folder = "/".join(parts[:-1])
        return [rel, folder + "/", parts[-2] + "/"]
    stem = base[:-3]
    return [rel, base, stem]


def missing(doc: str, files: dict[str, list[str]]) -> list[str]:
    """`crate/src/<file>` of every file the map does not name."""
    out = []
    for crate, rels in files.items():
        sec = section(doc, crate)
        known = names(sec) if sec is not None else set()
        for rel in sorted(rels):
            w = wanted(rel)
            if w is not None and not any(n in known for n in w):
                out.append(f"{crate}/src/{rel}")
    return out


def sources(root: str) -> dict[str, list[str]]:
    files = {}
    for crate in CRATES:
        src = os.path.join(root, crate, "src")
        rels = []
        for d, _, fs in os.walk(src):
            for f in fs:
                if f.endswith(".rs"):
                    rels.append(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/"))
        files[crate] = rels
    return files


def self_test() -> int:
    doc = (
        "## Code map\n### `server/` — crate\n- `http/` — handlers (`buckets`, `records`);"
        " `errors.rs`\n- `cli/mod.rs`, `tier.rs, when.rs`\n### `storage/` — engine\n"
        "- `store/` and `codec::frame`\n## Invariants\n- `lost.rs`\n"
    )
    files = {
        "server": ["lib.rs", "http/mod.rs", "http/buckets.rs", "http/records.rs",
                   "http/errors.rs", "http/tokens.rs", "tier.rs", "when.rs",
                   "when_tests.rs", "cli/mod.rs"],
        "storage": ["store/mod.rs", "codec/frame.rs", "lost.rs"],
    }
    found = missing(doc, files)
    # `tokens` is named nowhere; `lost.rs` only outside the map's storage section
    assert found == ["server/src/http/tokens.rs", "storage/src/lost.rs"], found
    print("check-code-map self-test: ok")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    gone = missing(doc, sources(root))
    for m in gone:
        print(f"docs/architecture.md's code map does not name {m}: add it to its crate's section")
    print(f"code map: {len(gone)} modules missing")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main())
