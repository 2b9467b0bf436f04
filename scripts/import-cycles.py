"""Lists the import cycles between the modules of a Rust crate's `src/`.

    python3 scripts/import-cycles.py storage            # fails (exit 1) on a cycle
    python3 scripts/import-cycles.py server --report    # prints, always exits 0
    python3 scripts/import-cycles.py storage --edges    # also prints every edge
    python3 scripts/import-cycles.py --self-test        # checks itself on small crates
    python3 scripts/import-cycles.py server --known "crate::http: a b"
                                    # fails on any cycle but the known ones (listed as such)

Files first: `lib.rs`/`main.rs` is the crate root, `a/mod.rs` is module `a`, `a/b.rs` is
`a::b`, and a `#[path]` file is the child module its declaration names. File A depends on
file B when A names an item defined in B: through a `use` declaration (`crate::`, `super::`,
`self::`, a child module's name) or a path in the code (`crate::x::y`, `super::y`, a path
through a module imported by name). A name reached through a re-export (`pub use`) is
followed to the module that defines it (a name forwarded from another crate leads nowhere),
and a glob import (`use crate::*;`) counts only the names the file uses. A `pub use` is a
dependency of its own file only when the file also uses the name. Comments and strings are
skipped; test code (`#[cfg(test)] mod tests`) is code and counts.

Then modules, level by level, a folder being one module: under each parent, its child
modules (with everything under them) are the nodes, and child X depends on child Y when a
file under X depends on a file under Y. A parent and its own children are not compared (a
`mod.rs` using its children, or they it, is how a folder is built). A cycle is a strongly
connected set of more than one sibling; each is printed with one closed path through it,
every step with a file edge that makes it. Exit 1 when there is one (0 with `--report`),
or with `--known`, one that is not among those given (`<scope>: <modules>`, the modules in
any order; a known cycle that grows, or one that is gone, is reported too).
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ITEM_RE = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|union|mod|macro_rules!)\s+(" + IDENT + ")"
)
KEYWORDS = {"crate", "super", "self", "Self"}


def strip(text: str) -> str:
    """The text with comments, string and char literals blanked (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(s: str) -> list[str]:
    """Splits a use tree's braces content on its top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
    """A use tree as (path, bound name) pairs; the bound name is None for a glob."""
    tree = re.sub(r"\s+", "", tree)
    if tree.startswith("::"):
        tree = tree[2:]
    i = tree.find("{")
    if i >= 0 and tree.endswith("}"):
        head = [s for s in tree[:i].split("::") if s]
        out = []
        for part in split_top(tree[i + 1 : -1]):
            out += expand(part, prefix + head)
        return out
    segs = [s for s in tree.split("::") if s]
    if not segs:
        return []
    if segs[-1] == "*":
        return [(prefix + segs[:-1], None)]
    if segs[-1] == "self":
        segs = segs[:-1]
        return [(prefix + segs, (prefix + segs)[-1] if prefix + segs else None)]
    return [(prefix + segs, segs[-1])]


class Crate:
    def __init__(self, src: str):
        self.src = src
        self.files: dict[str, tuple[str, ...]] = {}  # relative path -> module path
        self.module_file: dict[tuple[str, ...], str] = {}
        self.children: dict[tuple[str, ...], set[str]] = {}
        self.text: dict[str, str] = {}
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self._walk(root, ())
        self.uses: dict[str, list[tuple[list[str], str | None, bool]]] = {}
        self.defined: dict[str, set[str]] = {}
        self.inline: dict[str, list[tuple[int, int, str]]] = {}
        for f in self.files:
            self._parse(f)

    def _walk(self, rel: str, module: tuple[str, ...]) -> None:
        path = os.path.join(self.src, rel)
        if not os.path.exists(path) or rel in self.files:
            return
        self.files[rel] = module
        self.module_file.setdefault(module, rel)
        text = strip(open(path, encoding="utf-8").read())
        self.text[rel] = text
        base = os.path.dirname(rel)
        own_dir = base if os.path.basename(rel) in ("lib.rs", "main.rs", "mod.rs") else rel[:-3]
        for m in re.finditer(r"(#\[path\s*=\s*\"\"\]\s*)?(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            name = m.group(2)
            self.children.setdefault(module, set()).add(name)
            # `#[path = "x.rs"]` (the literal was blanked): find it in the raw text
            raw = open(path, encoding="utf-8").read()
            pm = re.search(r"#\[path\s*=\s*\"([^\"]+)\"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + name + r"\s*;", raw)
            if pm:
                # the file is part of the declaring module's family: name it as its child
                self._walk(os.path.normpath(os.path.join(base, pm.group(1))), module + (name,))
                continue
            for cand in (os.path.join(own_dir, name + ".rs"), os.path.join(own_dir, name, "mod.rs")):
                if os.path.exists(os.path.join(self.src, cand)):
                    self._walk(os.path.normpath(cand), module + (name,))
                    break
        # inline modules (`mod tests { .. }`) are part of their file; their children none

    def _parse(self, rel: str) -> None:
        text = self.text[rel]
        uses = []
        for m in re.finditer(r"(?:^|[;{}\s])(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]+);", text):
            public = m.group(1) is not None
            tree = re.sub(r"\s+as\s+", " as ", m.group(2))
            for path, name in self._expand_as(tree):
                uses.append((path, name, public, m.start(2), m.end(2)))
        self.uses[rel] = uses
        self.defined[rel] = set(ITEM_RE.findall(text))
        inline = []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
            depth, j = 1, m.end()
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            inline.append((m.end(), j, m.group(1)))
        self.inline[rel] = inline

    def module_at(self, rel: str, pos: int) -> tuple[str, ...]:
        """The module at a position of a file: its own, or an inline `mod x { .. }` in it."""
        inner = [(s, name) for s, e, name in self.inline[rel] if s <= pos < e]
        return self.files[rel] + tuple(name for _, name in sorted(inner))

    @staticmethod
    def _expand_as(tree: str):
        # keep `as` aliases: rewrite `x as y` into a marker expand() understands
        tree = re.sub(r"\s+as\s+(" + IDENT + ")", r"@\1", tree.strip())
        out = []
        for path, name in expand(tree, []):
            alias = None
            if path and "@" in path[-1]:
                last, alias = path[-1].split("@")
                path = path[:-1] + [last]
                name = alias
            out.append((path, name))
        return out

    def anchor(self, module: tuple[str, ...], segs: list[str]) -> tuple[tuple[str, ...], list[str]] | None:
        """Where a path starts: (module, remaining segments), or None if outside the crate."""
        if not segs:
            return None
        if segs[0] == "crate":
            return (), segs[1:]
        if segs[0] in ("self", "super"):
            cur = module
            i = 0
            while i < len(segs) and segs[i] in ("self", "super"):
                if segs[i] == "super":
                    cur = cur[:-1]
                i += 1
            return cur, segs[i:]
        if segs[0] in self.children.get(module, ()):
            return module, segs
        return None

    def exports(self, module: tuple[str, ...]) -> dict[str, list[list[str]]]:
        """The names a module forwards with `pub use`, to the absolute paths they name."""
        rel = self.module_file.get(module)
        out: dict[str, list[list[str]]] = {}
        if rel is None:
            return out
        for path, name, public, start, _ in self.uses[rel]:
            if name is None or self.module_at(rel, start) != module:
                continue
            a = self.anchor(module, path)
            out.setdefault(name, []).append(path if a is None else ["crate", *a[0], *a[1]])
        return out

    def resolve(self, module: tuple[str, ...], segs: list[str], seen=None) -> set[str]:
        """The files a path names an item of."""
        a = self.anchor(module, segs)
        if a is None:
            return set()
        cur, rest = a
        while rest and rest[0] in self.children.get(cur, ()):
            cur, rest = cur + (rest[0],), rest[1:]
        rel = self.module_file.get(cur)
        if rel is None:
            return set()
        if not rest:
            return {rel}
        name = rest[0]
        if name in self.defined[rel]:
            return {rel}
        seen = seen or set()
        if (cur, name) in seen:
            return {rel}
        seen.add((cur, name))
        forwarded = self.exports(cur).get(name)
        if forwarded is None:
            return {rel}
        targets = set()
        for path in forwarded:  # a name forwarded from another crate leads nowhere here
            targets |= self.resolve((), path, seen)
        return targets

    def glob(self, module: tuple[str, ...], target: tuple[str, ...], used: set[str]) -> set[str]:
        rel = self.module_file.get(target)
        if rel is None:
            return set()
        out = set()
        for name in used & self.defined[rel]:
            out.add(rel)
        for name, paths in self.exports(target).items():
            if name in used:
                for p in paths:
                    out |= self.resolve((), p)
        return out

    def edges(self) -> dict[str, dict[str, set[str]]]:
        """file -> {file it depends on -> the names that make the edge}."""
        graph: dict[str, dict[str, set[str]]] = {f: {} for f in self.files}
        for rel, module in self.files.items():
            text = self.text[rel]

            def add(targets, why):
                for t in targets:
                    if t != rel:
                        graph[rel].setdefault(t, set()).add(why)

            spans = [(s, e) for _, _, _, s, e in self.uses[rel]]
            body = text
            for s, e in sorted(set(spans), reverse=True):
                body = body[:s] + " " * (e - s) + body[e:]
            used = set(re.findall(IDENT, body))
            aliases: dict[str, list[str]] = {}
            for path, name, public, start, _ in self.uses[rel]:
                a = self.anchor(self.module_at(rel, start), path)
                if a is None:
                    continue
                absolute = ["crate", *a[0], *a[1]]
                if name is None:
                    add(self.glob(module, self._walk_mod(*a), used), "*")
                    continue
                if public and name not in used:
                    continue  # a re-export only: followed by resolve(), not a dependency here
                add(self.resolve((), absolute), name)
                aliases[name] = absolute
            # paths in the code: crate::a::b, super::b, self::b, alias::b
            for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:" + IDENT + r"\s*::\s*)+" + IDENT + ")", body):
                segs = [s.strip() for s in m.group(1).split("::")]
                if segs[0] in aliases and segs[0] not in KEYWORDS:
                    segs = aliases[segs[0]] + segs[1:]
                elif segs[0] not in ("crate", "super", "self"):
                    continue
                add(self.resolve(self.module_at(rel, m.start()), segs), "::".join(segs[:3]))
        return graph

    def _walk_mod(self, cur, rest):
        while rest and rest[0] in self.children.get(cur, ()):
            cur, rest = cur + (rest[0],), rest[1:]
        return cur


def sccs(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def example_cycle(graph, comp: list[str]) -> list[str]:
    """A shortest closed path through the component's first file."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def module_graphs(crate: Crate, graph):
    """For each module with children: its children as nodes, an edge c1 -> c2 when a file
    in c1's subtree depends on a file in c2's. A parent and its own children are not
    siblings: a `mod.rs` using its children (or they it) is layering, not a cycle."""
    levels: dict[tuple[str, ...], dict[str, dict[str, set[str]]]] = {}
    for f, targets in graph.items():
        mf = crate.files[f]
        for g, names in targets.items():
            mg = crate.files[g]
            k = 0
            while k < min(len(mf), len(mg)) and mf[k] == mg[k]:
                k += 1
            if k == len(mf) or k == len(mg):
                continue
            level = levels.setdefault(mf[:k], {})
            level.setdefault(mf[k], {}).setdefault(mg[k], set()).add(
                f"{f} -> {g} ({', '.join(sorted(names)[:4])})"
            )
            level.setdefault(mg[k], {})
    return levels


def self_test() -> int:
    """Checks the finder on small crates written to a temporary folder."""
    import tempfile

    def cycles(files: dict[str, str]) -> list[list[str]]:
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                path = os.path.join(d, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            crate = Crate(os.path.join(d, "src"))
            levels = module_graphs(crate, crate.edges())
            return [c for _, level in sorted(levels.items()) for c in sccs(level)]

    lib = "mod a;\nmod b;\nmod f;\npub use a::A;\npub use b::B;\n"
    # a glob import counts the names used: `a` uses B through `use crate::*`, `b` uses A
    found = cycles({
        "lib.rs": lib,
        "a.rs": "use crate::*;\npub struct A(B);\n",
        "b.rs": "pub struct B;\nfn f() -> crate::a::A { todo!() }\n",
        "f/mod.rs": "mod x;\npub use x::X;\n",
        "f/x.rs": "use super::*;\npub struct X;\n",
    })
    assert found == [["a", "b"]], found
    # the same crate, layered: a string or a comment naming the other module is no edge,
    # a folder and its own children are not a cycle, a test module's `super` is its file
    found = cycles({
        "lib.rs": lib,
        "a.rs": "use crate::*;\npub struct A(B);\n",
        "b.rs": "// crate::a::A\npub struct B;\nconst S: &str = \"crate::a::A\";\n"
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        "f/mod.rs": "mod x;\npub use x::X;\npub struct Y;\n",
        "f/x.rs": "use super::Y;\npub struct X(Y);\n",
    })
    assert found == [], found
    print("import-cycles self-test: ok")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("crate", help="the crate's directory (its src/ is read)")
    ap.add_argument("--report", action="store_true", help="print the cycles but exit 0")
    ap.add_argument("--edges", action="store_true", help="also print every file edge and its names")
    ap.add_argument("--known", action="append", default=[], metavar="SCOPE: MODULES",
                    help="a cycle being taken apart, e.g. 'crate::cli: buckets entries': not a failure")
    args = ap.parse_args()
    known = set()
    for k in args.known:
        scope, _, mods = k.rpartition(":")
        known.add((scope.strip(), frozenset(mods.split())))
    seen = set()
    crate = Crate(os.path.join(args.crate, "src"))
    graph = crate.edges()
    if args.edges:
        for f in sorted(graph):
            for t in sorted(graph[f]):
                print(f"{f} -> {t}: {', '.join(sorted(graph[f][t]))}")
    cycles = modules = new = 0
    for parent, level in sorted(module_graphs(crate, graph).items()):
        where = "::".join(("crate",) + parent)
        for comp in sccs(level):
            cycles += 1
            modules += len(comp)
            key = (where, frozenset(comp))
            seen.add(key)
            new += key not in known
            tag = " (known)" if key in known else ""
            print(f"cycle in {where}, {len(comp)} modules: {' '.join(comp)}{tag}")
            path = example_cycle(level, comp)
            for a, b in zip(path, path[1:]):
                print(f"  {a} -> {b}: {sorted(level[a][b])[0]}")
    for scope, mods in sorted(known - seen, key=lambda k: (k[0], sorted(k[1]))):
        print(f"known cycle gone: {scope}: {' '.join(sorted(mods))} (drop it from --known)")
    print(f"{args.crate}: {len(crate.files)} files, {cycles} import cycles, {modules} modules in them")
    if args.known:
        print(f"{args.crate}: {new} import cycles not known")
        return 1 if new and not args.report else 0
    return 1 if cycles and not args.report else 0


if __name__ == "__main__":
    sys.exit(main())
