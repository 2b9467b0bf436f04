"""``mypy --strict`` over the package and over the Python snippets of the docs (issue 31):
``db.bucket("cams").entry("front").write(...)``, ``rec.data``, ``rec.labels``, ``rec.ts``
and the records of a query are typed, with nothing left ``Any``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from test_docs import DOCS, joined

ROOT = REPO / "client-py"


def mypy(*args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--config-file", str(ROOT / "pyproject.toml"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_the_package_passes_mypy_strict() -> None:
    out = mypy("src/tsblob")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_python_snippets_of_the_docs_pass_mypy_strict(tmp_path: Path) -> None:
    files = []
    for i, doc in enumerate(DOCS):
        path = tmp_path / f"doc{i}_{doc.stem.replace('-', '_').lower()}.py"
        path.write_text(joined(doc), encoding="utf-8")
        files.append(str(path))
    out = mypy(*files)
    assert out.returncode == 0, out.stdout + out.stderr


def test_entry_handle_had_no_write_for_mypy_and_records_were_any(tmp_path: Path) -> None:
    """What the issue found: ``"EntryHandle" has no attribute "write"`` and ``Any`` records."""
    code = '''
from typing import List
from tsblob import AsyncClient, Client, Record, RecordInfo


def sync(db: Client) -> None:
    cam = db.bucket("cams").entry("front")
    ts: int = cam.write(b"x", labels={"alarm": True})
    for rec in cam.query(start="now-5m"):
        reveal_type(rec)
        data: bytes = rec.data
        labels: dict[str, str] = rec.labels
        t: int = rec.ts
    infos: List[RecordInfo] = list(db.bucket("cams").query("front", meta=True))
    with cam.read_stream(ts) as r:
        reveal_type(r)


async def asynchronous(db: AsyncClient) -> None:
    cam = db.bucket("cams").entry("front")
    ts: int = await cam.write(b"x")
    async for rec in cam.query(start=ts):
        reveal_type(rec)
        data: bytes = await rec.read()
'''
    path = tmp_path / "typed.py"
    path.write_text(code, encoding="utf-8")
    out = mypy(str(path))
    revealed = [ln.split("Revealed type is ")[1] for ln in out.stdout.splitlines() if "Revealed type is" in ln]
    assert revealed == ['"tsblob._sync.client.Record"', '"tsblob._sync.client.Record"',
                        '"tsblob._async.client.AsyncRecord"'], out.stdout
    errors = [ln for ln in out.stdout.splitlines() if ": error:" in ln]
    assert errors == [], out.stdout
