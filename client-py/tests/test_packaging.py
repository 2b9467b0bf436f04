"""The package as users get it: the wheel's contents and metadata, the sync client generated
from the async one (and not stale), ``import tsblob`` without aiohttp, and the syntax of the
oldest Python the package claims."""

from __future__ import annotations

import ast
import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tsblob

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import hatch_build  # noqa: E402


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_tsblob_does_not_import_aiohttp() -> None:
    out = run_python("import sys, tsblob\n"
                     "with tsblob.Client('http://127.0.0.1:9') as db: pass\n"
                     "print('aiohttp' in sys.modules, 'tsblob._aio' in sys.modules)\n"
                     "tsblob.AsyncClient\n"
                     "print('aiohttp' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"]


def test_async_client_without_aiohttp_says_what_to_install() -> None:
    # sys.modules[name] = None makes `import name` fail, as in an environment without it.
    out = run_python("import sys\nsys.modules['aiohttp'] = None\nimport tsblob\n"
                     "db = tsblob.Client()\n"
                     "try:\n    from tsblob import AsyncClient\nexcept ImportError as e:\n    print(e)")
    assert out.returncode == 0, out.stderr
    assert "pip install 'tsblob[async]'" in out.stdout and "optional dependency" in out.stdout


def test_the_generated_sync_client_matches_its_async_source() -> None:
    """A stale ``_sync/client.py`` (the async source edited without a reinstall) fails here."""
    want = hatch_build.generated(ROOT)
    assert set(want) == {Path("src/tsblob/_sync/__init__.py"), Path("src/tsblob/_sync/client.py"),
                         Path("src/tsblob/_sync/handles.py"), Path("src/tsblob/_async/handles.py")}
    for rel, text in want.items():
        assert (ROOT / rel).read_text(encoding="utf-8") == text, f"{rel} is stale: pip install -e client-py"
    sync = want[Path("src/tsblob/_sync/client.py")]
    tree = ast.parse(sync)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor,
                                                             ast.AsyncWith))]
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert names == {"Client", "QueryIterator", "Record"}
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "_http" in imported and not {m for m in imported if m and ("_aio" in m or "aiohttp" in m)}
    handles = ast.parse(want[Path("src/tsblob/_sync/handles.py")])
    assert {n.name for n in handles.body if isinstance(n, ast.ClassDef)} == {"BucketHandle", "EntryHandle"}
    imported = {n.module for n in ast.walk(handles) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and ("_aio" in m or "aiohttp" in m)}


def test_both_clients_have_the_same_methods_and_docstrings() -> None:
    from tsblob import AsyncClient, AsyncRecord

    for sync_cls, async_cls in ((tsblob.Client, AsyncClient), (tsblob.Record, AsyncRecord)):
        public = {n for n in vars(sync_cls) if not n.startswith("_")}
        renamed = {n.replace("aiter_chunks", "iter_chunks").replace("aclose", "close")
                   for n in vars(async_cls) if not n.startswith("_")}
        assert public == renamed
        for name in public:
            assert getattr(sync_cls, name).__doc__, f"{sync_cls.__name__}.{name} has no docstring"


def test_sources_parse_as_the_oldest_supported_python() -> None:
    oldest = tuple(int(x) for x in _metadata_requires_python().lstrip(">=").split("."))
    assert oldest == (3, 10)
    for path in sorted((ROOT / "src").rglob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=oldest)  # raises if newer syntax


def _metadata_requires_python() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("requires-python"):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("no requires-python in pyproject.toml")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("hatchling", reason="the test extra installs hatchling")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, timeout=300)
    (whl,) = out.glob("tsblob-*.whl")
    return whl


def test_the_wheel_has_the_licence_the_generated_client_and_honest_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_string(z.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
                                         .decode())
        licence = [n for n in names if "/licenses/" in n]
        assert licence and b"Apache License" in z.read(licence[0])
    assert {"tsblob/_sync/client.py", "tsblob/_async/client.py", "tsblob/_aio.py", "tsblob/py.typed",
            "tsblob/_sync/handles.py", "tsblob/_async/handles.py"} <= names
    assert meta["Version"] == tsblob.__version__
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["License-Expression"] == "Apache-2.0"
    # aiohttp only with the extra
    requires = meta.get_all("Requires-Dist") or []
    assert [r for r in requires if "extra ==" not in r] == []  # the sync client needs nothing
    assert "aiohttp<4,>=3.9; extra == 'async'" in requires
    assert "async" in meta.get_all("Provides-Extra")
    # No project URL until tsblob has a public address (none was invented; see pyproject.toml).
    assert meta.get_all("Project-URL") is None
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.10" in classifiers and "Typing :: Typed" in classifiers
    readme = meta.get_payload()
    # Not on PyPI: the README says to install from the source tree (walkthrough: `pip install
    # tsblob` failed), with the extras as the pyproject names them.
    assert "pip install ./client-py" in readme and "pip install tsblob" not in readme
    assert "./client-py[async]" in readme and "./client-py[pandas]" in readme
    assert "](../" not in readme and "](docs/" not in readme
