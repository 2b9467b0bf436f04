"""Build hook: generates the sync client from the async one with unasync.

The client is written once, as asyncio code in ``src/tsblob/_async/`` (``AsyncClient``,
``AsyncQueryIterator``, ``AsyncRecord``). Every build (wheel, sdist install, and the
editable install of development: ``pip install -e client-py``) writes
``src/tsblob/_sync/`` from it: ``async``/``await`` removed, the names below replaced.

It first writes ``src/tsblob/_async/handles.py``: the bucket and entry handles
(``AsyncBucketHandle``, ``AsyncEntryHandle``), one explicit, typed method for each public
method of ``AsyncClient`` whose first parameters are ``bucket`` (and ``entry``), with the
same signature after them, the same docstring and return type (so that a type checker sees
``db.bucket("b").entry("e").write(...)``); unasync then makes the sync twins
(``BucketHandle``, ``EntryHandle``). A method added to the client gets its handle methods
at the next build, with nothing to write by hand.

The generated files are not in git (``.gitignore``); the wheel includes them.
``tests/test_packaging.py`` checks that they match their source (an edit of the source
without a reinstall would otherwise test a stale sync client).

Run it by hand with ``python hatch_build.py`` (needs ``pip install unasync``).
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # imported by tests/test_packaging.py or run as a script: no hatchling there
    BuildHookInterface = object  # type: ignore[assignment,misc]

SRC = Path("src") / "tsblob" / "_async"
OUT = Path("src") / "tsblob" / "_sync"
REPLACEMENTS = {
    # the classes of the async source and their sync names
    "AsyncClient": "Client",
    "AsyncQueryIterator": "QueryIterator",
    "AsyncRecord": "Record",
    "AsyncBucketHandle": "BucketHandle",
    "AsyncEntryHandle": "EntryHandle",
    "AsyncContextManager": "ContextManager",
    # the transport: aiohttp's module and its method names, and http.client's
    "_aio": "_http",
    "aclose": "close",
    "aiter_chunks": "iter_chunks",
}
HEADER = ("# GENERATED from tsblob/_async/{name} by client-py/hatch_build.py (unasync) when the package\n"
          "# is built: do not edit; edit the async source and reinstall (pip install -e client-py).\n")
HANDLES = SRC / "handles.py"
HANDLES_HEADER = ("# GENERATED from the methods of AsyncClient (tsblob/_async/client.py) by client-py/hatch_build.py\n"
                  "# when the package is built: do not edit; edit the client and reinstall (pip install -e client-py).\n")
HANDLES_DOC = '''"""Handles: ``db.bucket("robot1")`` and ``db.bucket("robot1").entry("cam/front")``.

A handle holds a client and names; its methods are the client's methods whose first
parameters are ``bucket`` (a bucket handle) or ``bucket, entry`` (an entry handle), with
those filled in: ``entry.write(data, ts)`` is ``db.write("robot1", "cam/front", data, ts)``.
Each is written out here, typed as the client's method (generated from it by
``hatch_build.py``), so that type checkers and editors see them.
"""
'''
HANDLES_CLASSES = '''

class AsyncBucketHandle:
    """A bucket of a client: every method of the client that takes ``bucket`` first, without
    it (``write(entry, data, ts)``, ``query(entry, start, stop)``, ``remove(entry, ts)``,
    ``get_bucket()``, ``update_bucket(...)``, ``remove_bucket()``...), plus ``info()`` and
    ``entry(name)``. Creating a handle sends nothing."""

    __slots__ = ("client", "name")

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    def entry(self, name: str) -> AsyncEntryHandle:
        """A handle on one entry of this bucket (sends nothing)."""
        _entry_path(self.name, name)  # a bad name fails here, not at first use
        return AsyncEntryHandle(self.client, self.name, name)

    async def info(self) -> Bucket:
        """The bucket's settings, totals and entries (``get_bucket``)."""
        return await self.client.get_bucket(self.name)

    def __repr__(self) -> str:
        return f"BucketHandle({self.client!r}, {self.name!r})"
{bucket_methods}

class AsyncEntryHandle:
    """An entry of a bucket: every method of the client that takes ``bucket, entry`` first,
    without them (``write(data, ts)``, ``read(ts)``, ``query(start, stop)``, ``tail()``,
    ``remove(ts)``, ``get_entry()``, ``remove_entry()``...), plus ``info()``. Creating a
    handle sends nothing."""

    __slots__ = ("client", "bucket", "name")

    def __init__(self, client: AsyncClient, bucket: str, name: str) -> None:
        self.client = client
        self.bucket = bucket
        self.name = name

    async def info(self) -> EntryInfo:
        """The entry's record count, size and time span (``get_entry``)."""
        return await self.client.get_entry(self.bucket, self.name)

    def __repr__(self) -> str:
        return f"EntryHandle({self.client!r}, {self.bucket!r}, {self.name!r})"
{entry_methods}'''


def _decorators(node: ast.AST) -> List[str]:
    names = []
    for d in getattr(node, "decorator_list", []):
        names.append(d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "")
    return names


def _handle_method(node: Any, n: int, bound: List[str], doc: Any) -> str:
    """The handle's version of the client method ``node`` with its first ``n`` parameters
    (after ``self``) bound to the handle's attributes ``bound``."""
    import copy

    fn = copy.deepcopy(node)
    args = fn.args
    positional = args.posonlyargs + args.args
    kept = [positional[0]] + positional[1 + n:]
    args.posonlyargs, args.args = [], kept
    # defaults belong to the last parameters: the bound (first) ones never have one
    args.defaults = args.defaults[len(args.defaults) - min(len(args.defaults), len(kept) - 1):]
    decorators = _decorators(node)
    is_overload = "overload" in decorators
    cm = "asynccontextmanager" in decorators
    fn.decorator_list = [ast.Name("overload")] if is_overload else []
    if cm:  # an async context manager: the handle returns the client's, unawaited
        fn = ast.FunctionDef(fn.name, fn.args, fn.body, fn.decorator_list, fn.returns, None)
        if isinstance(fn.returns, ast.Subscript):
            fn.returns = ast.Subscript(ast.Name("AsyncContextManager"), fn.returns.slice)
    call_args: List[ast.expr] = [ast.Attribute(ast.Name("self"), b) for b in bound]
    call_args += [ast.Name(a.arg) for a in kept[1:]]
    if args.vararg is not None:
        call_args.append(ast.Starred(ast.Name(args.vararg.arg)))
    keywords = [ast.keyword(a.arg, ast.Name(a.arg)) for a in args.kwonlyargs]
    if args.kwarg is not None:
        keywords.append(ast.keyword(None, ast.Name(args.kwarg.arg)))
    call: ast.expr = ast.Call(ast.Attribute(ast.Attribute(ast.Name("self"), "client"), fn.name), call_args, keywords)
    if isinstance(fn, ast.AsyncFunctionDef):
        call = ast.Await(call)
    if is_overload:
        body: List[ast.stmt] = [ast.Expr(ast.Constant(...))]
    else:
        body = ([ast.Expr(ast.Constant(doc))] if doc is not None else []) + [ast.Return(call)]
    fn.body = body
    # Unparsed inside a class, so that the docstring keeps the client's indentation
    # (``__doc__`` is then the same string as the client method's).
    cls = ast.ClassDef("_", [], [], [fn], [])
    return ast.unparse(ast.fix_missing_locations(cls)).split("\n", 1)[1]


def handles_source(client_source: str) -> str:
    """``_async/handles.py`` from the source of ``_async/client.py``."""
    tree = ast.parse(client_source)
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               and not (isinstance(node, ast.ImportFrom) and node.module in ("handles", ".handles"))
               and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]
    own = sorted({t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                  for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                  if isinstance(t, ast.Name) and not t.id.startswith("__")}
                 | {node.name for node in tree.body if isinstance(node, ast.ClassDef)})
    client = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "AsyncClient")
    docs: Dict[str, Any] = {}
    for node in client.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "overload" not in _decorators(node):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docs[node.name] = first.value.value
    methods: Dict[int, List[str]] = {1: [], 2: []}
    fixed = {"info", "entry", "client", "name", "bucket"}
    for node in client.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        if node.name in fixed:
            continue
        names = [a.arg for a in (node.args.posonlyargs + node.args.args)[1:3]]
        n = 2 if names == ["bucket", "entry"] else 1 if names[:1] == ["bucket"] else 0
        if n == 2:
            methods[2].append(_handle_method(node, 2, ["bucket", "name"], docs.get(node.name)))
        if n >= 1:
            methods[1].append(_handle_method(node, 1, ["name"], docs.get(node.name)))
    head = [HANDLES_DOC, "from __future__ import annotations\n",
            "from typing import TYPE_CHECKING, AsyncContextManager, overload\n"]
    head += [ast.unparse(node) for node in imports]
    head += ["from .._common import entry_path as _entry_path", "",
             "if TYPE_CHECKING:",
             "    from .client import " + ", ".join(own), "",
             '__all__ = ["AsyncBucketHandle", "AsyncEntryHandle"]', ""]
    body = (HANDLES_CLASSES.replace("{bucket_methods}", "".join("\n" + m + "\n" for m in methods[1]))
            .replace("{entry_methods}", "".join("\n" + m + "\n" for m in methods[2])))
    return HANDLES_HEADER + "\n".join(head) + body


def generated(root: Path) -> Dict[Path, str]:
    """The sync files as they should be: ``{path under root: text}``."""
    import unasync

    out: Dict[Path, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "_async"
        shutil.copytree(root / SRC, src, ignore=shutil.ignore_patterns("__pycache__", HANDLES.name))
        handles = handles_source((root / SRC / "client.py").read_text(encoding="utf-8"))
        (src / HANDLES.name).write_text(handles, encoding="utf-8")
        out[HANDLES] = handles
        files = sorted(str(p) for p in src.glob("*.py"))
        unasync.unasync_files(files, [unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)])
        for p in sorted((Path(tmp) / "_sync").glob("*.py")):
            out[OUT / p.name] = HEADER.format(name=p.name) + p.read_text(encoding="utf-8")
    return out


def generate(root: Path) -> None:
    (root / OUT).mkdir(exist_ok=True)
    # (the handles are written into _async/ too: src/tsblob/_async/handles.py)
    for rel, text in generated(root).items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


class UnasyncHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        root = Path(self.root)
        generate(root)
        if self.target_name == "wheel" and version != "editable":
            for rel in generated(root):
                build_data["force_include"][str(root / rel)] = str(rel.relative_to("src"))


if __name__ == "__main__":
    generate(Path(__file__).resolve().parent)
