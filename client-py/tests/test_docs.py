"""The Python snippets of the docs run, and type-check (issue 31).

Every ```python block of the repository's README.md, of client-py/README.md and of
docs/python.md runs as a test against a real ``tsblob serve``: the blocks of one document in
order, in one namespace (a block uses what an earlier one defined), against a fresh server
of its own (as a reader starts), with ``http://127.0.0.1:8686`` pointing at it (and ``$TSBLOB_URL`` set to it), in
a fresh working directory. The same blocks, joined per document, are checked by
``mypy --strict`` (``test_typing.py``). A block whose first line is
``# doc-test: skip (why)`` is shown only: neither run nor type-checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import REPO, Server

DOCS = [REPO / "README.md", REPO / "client-py" / "README.md", REPO / "docs" / "python.md"]
SKIP = "# doc-test: skip"
DOC_URL = "http://127.0.0.1:8686"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclass
class Block:
    doc: Path
    line: int
    code: str

    @property
    def skipped(self) -> bool:
        return self.code.lstrip().startswith(SKIP)


def blocks(doc: Path) -> List[Block]:
    text = doc.read_text(encoding="utf-8")
    return [Block(doc, text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def joined(doc: Path) -> str:
    """The runnable blocks of ``doc`` as one module (for mypy), each after a comment saying
    where it comes from."""
    rel = doc.relative_to(REPO)
    return "".join(f"# {rel}:{b.line}\n{b.code}\n" for b in blocks(doc) if not b.skipped)


def test_every_document_has_runnable_python_blocks() -> None:
    for doc in DOCS:
        found = blocks(doc)
        assert found and [b for b in found if not b.skipped], doc
        for b in found:
            if b.skipped:
                assert re.match(re.escape(SKIP) + r" \(.+\)", b.code.lstrip()), \
                    f"{doc}:{b.line}: say why a block is skipped: '{SKIP} (why)'"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_python_blocks_of_the_docs_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(tmp_path / "data", []).start()
    try:
        _run(doc, server, tmp_path, monkeypatch)
    finally:
        server.stop()


def _run(doc: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TSBLOB_URL", server.url)
    monkeypatch.delenv("TSBLOB_TOKEN", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    _prepare(doc, server)
    namespace: Dict[str, Any] = {"__name__": "__doc_test__"}
    for b in blocks(doc):
        if b.skipped:
            continue
        code = b.code.replace(DOC_URL, server.url)
        try:
            exec(compile(code, f"{doc.relative_to(REPO)}:{b.line}", "exec"), namespace)
        except BaseException as e:
            raise AssertionError(f"the block at {doc.relative_to(REPO)}:{b.line} failed: {e!r}\n{b.code}") from e
    for value in list(namespace.values()):  # clients the document left open
        close = getattr(value, "close", None)
        if type(value).__name__ == "Client" and callable(close):
            close()


def _prepare(doc: Path, server: Server) -> None:
    """What a document's text does before its first Python block in another language (the
    README writes its first record with curl): done here with the SDK."""
    import tsblob

    with tsblob.Client(server.url) as db:
        if doc.name == "README.md" and doc.parent == REPO:
            db.create_bucket("demo")
            db.write("demo", "sensor-1", b"hello, tsblob", 1_700_000_000_000_000, content_type="text/plain",
                     labels={"room": "kitchen"})
