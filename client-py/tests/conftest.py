"""Fixtures: a real ``tsblob serve`` on a free port and a temporary data folder.

The binary is ``$TSBLOB_BIN`` if set, else ``<repo>/target/release/tsblob`` if built, else
``cargo build --release -p tsblob-server`` is run from the repository root first. Each
server is stopped (SIGTERM, then SIGKILL after 10 s) when the session ends; its log is
shown when it fails to start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator, List, Optional

import urllib.error
import urllib.request

import pytest

import tsblob
from bridge import Bridge, Loop

if TYPE_CHECKING:
    from proxy import Proxy

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "test-admin-token-0123456789"


def tsblob_binary() -> Path:
    env = os.environ.get("TSBLOB_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.exit(f"TSBLOB_BIN={env} is not a file: build it with `cargo build --release -p tsblob-server`",
                        returncode=2)
        return path
    path = REPO / "target" / "release" / "tsblob"
    if not path.is_file():
        subprocess.run(["cargo", "build", "--release", "-p", "tsblob-server"], cwd=REPO, check=True)
    return path


def server_env() -> dict:
    """The environment without TSBLOB_* settings (a developer's TSBLOB_TOKEN would change
    what the tests see); the fixture passes everything the server needs as flags."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TSBLOB_")}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One running ``tsblob serve`` process."""

    def __init__(self, data: Path, extra_args: List[str], token: Optional[str] = None) -> None:
        self.data = data
        self.extra_args = extra_args
        self.token = token
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self.log = data.parent / f"{data.name}.log"

    def start(self, attempts: int = 3, port: Optional[int] = None, scheme: str = "http") -> "Server":
        """Starts the server on a free port (``port``: on that one, as a restart does), its
        URL ``scheme://127.0.0.1:port`` (``https`` for a server given ``--tls-cert``)."""
        binary = tsblob_binary()
        fixed = port
        for _ in range(attempts):
            port = fixed or free_port()
            self.url = f"{scheme}://127.0.0.1:{port}"
            with open(self.log, "ab" if fixed else "wb") as log:
                self.proc = subprocess.Popen(
                    [str(binary), "serve", "--data", str(self.data), "--listen", f"127.0.0.1:{port}",
                     *self.extra_args],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=server_env())
            if self._wait_healthy(timeout=30.0):
                return self
            if fixed is not None:
                self.terminate()
                continue
            self.stop()  # the port may have been taken between free_port() and bind: retry
        raise RuntimeError(f"tsblob serve did not become healthy; its log:\n{self.log_tail()}")

    def _wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        context = None
        if self.url.startswith("https://"):  # (up is up: the tests check certificates themselves)
            import ssl

            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0, context=context) as resp:
                    if resp.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        return False

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def terminate(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s) and keeps its data folder:
        ``start(port=...)`` starts it again on it."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Stops the server and removes its data folder (pytest keeps the temporary folders
        of the last runs; the log beside the data folder stays for post-mortems)."""
        self.terminate()
        shutil.rmtree(self.data, ignore_errors=True)

    def client(self, **kw: object) -> tsblob.Client:
        kw.setdefault("token", self.token)
        return tsblob.Client(self.url, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server without tokens: every route is open."""
    srv = Server(tmp_path_factory.mktemp("tsblob") / "data", []).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with an admin token: requests without a valid token are refused."""
    srv = Server(tmp_path_factory.mktemp("tsblob-auth") / "data", ["--token", ADMIN_TOKEN], ADMIN_TOKEN).start()
    yield srv
    srv.stop()


@pytest.fixture(params=["sync", "async"])
def make_client(request: pytest.FixtureRequest, server: Server) -> Iterator[Callable[..., tsblob.Client]]:
    """Makes clients of ``server`` (keyword arguments as for ``Client``): a ``Client``, or an
    ``AsyncClient`` driven through :class:`bridge.Bridge`; every test that takes ``client``
    or ``make_client`` runs once with each, so one test body checks both clients."""
    made: List[tsblob.Client] = []
    loop = Loop() if request.param == "async" else None

    def make(url: Optional[str] = None, **kw: Any) -> tsblob.Client:
        kw.setdefault("token", server.token)
        if loop is None:
            db = tsblob.Client(url or server.url, **kw)
        else:
            db = Bridge(tsblob.AsyncClient(url or server.url, **kw), loop)  # type: ignore[assignment]
        made.append(db)
        return db

    make.flavour = request.param  # type: ignore[attr-defined]
    yield make
    for db in made:
        db.close()
    if loop is not None:
        loop.stop()


@pytest.fixture
def client(make_client: Callable[..., tsblob.Client]) -> tsblob.Client:
    """A client of the session's server, sync or async (see ``make_client``)."""
    return make_client()


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[tsblob.AsyncClient]:
    async with tsblob.AsyncClient(server.url) as db:
        yield db


@pytest.fixture
def bucket(server: Server) -> Iterator[str]:
    """A fresh, empty bucket, removed after the test."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    with server.client() as db:
        db.create_bucket(name)
    yield name
    with server.client() as db:
        try:
            db.remove_bucket(name)
        except tsblob.NotFound:
            pass


@pytest.fixture
def proxy(server: Server) -> Iterator["Proxy"]:
    """A fault-injecting TCP proxy in front of the session's server (see proxy.py)."""
    from proxy import Proxy

    p = Proxy(server.url)
    yield p
    p.close()
