"""Build hook: generates the sync client from the async one with unasync.

The client is written once, as asyncio code in ``src/tsblob/_async/`` (``AsyncClient``,
``AsyncQueryIterator``, ``AsyncRecord``). Every build (wheel, sdist install, and the
editable install of development: ``pip install -e client-py``) writes
``src/tsblob/_sync/`` from it: ``async``/``await`` removed, the names below replaced. The
generated files are not in git (``.gitignore``); the wheel includes them.
``tests/test_packaging.py`` checks that they match their source (an edit of the source
without a reinstall would otherwise test a stale sync client).

Run it by hand with ``python hatch_build.py`` (needs ``pip install unasync``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict

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
    # the transport: aiohttp's module and its method names, and http.client's
    "_aio": "_http",
    "aclose": "close",
    "aiter_chunks": "iter_chunks",
}
HEADER = ("# GENERATED from tsblob/_async/{name} by client-py/hatch_build.py (unasync) when the package\n"
          "# is built: do not edit; edit the async source and reinstall (pip install -e client-py).\n")


def generated(root: Path) -> Dict[Path, str]:
    """The sync files as they should be: ``{path under root: text}``."""
    import unasync

    out: Dict[Path, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "_async"
        shutil.copytree(root / SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
        files = sorted(str(p) for p in src.glob("*.py"))
        unasync.unasync_files(files, [unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)])
        for p in sorted((Path(tmp) / "_sync").glob("*.py")):
            out[OUT / p.name] = HEADER.format(name=p.name) + p.read_text(encoding="utf-8")
    return out


def generate(root: Path) -> None:
    (root / OUT).mkdir(exist_ok=True)
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
