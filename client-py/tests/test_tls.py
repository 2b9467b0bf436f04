"""TLS against a real ``tsblob serve --tls-cert/--tls-key`` with a self-signed certificate
(made by ``openssl``): ``$TSBLOB_CA`` as the CLI reads it, and what ``TransportError`` says
when TLS and plain HTTP are mixed up or the certificate is not trusted. Every test runs with
the sync ``Client`` and with the ``AsyncClient`` (through :class:`bridge.Bridge`)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

import tsblob

from conftest import Server


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate of localhost and 127.0.0.1 (its key beside it, ``key.pem``)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificate")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:FALSE", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    return folder / "cert.pem"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, cert: Path) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("tsblob-tls") / "data",
                 ["--tls-cert", str(cert), "--tls-key", str(cert.parent / "key.pem")]).start(scheme="https")
    yield srv
    srv.stop()


@pytest.fixture
def make(make_client: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Makes a client (``Client`` or a bridged ``AsyncClient``) of a URL, retries off and
    ``TSBLOB_CA`` unset unless a test sets it."""
    monkeypatch.delenv("TSBLOB_CA", raising=False)

    def made(url: str, **kw: Any) -> Any:
        kw.setdefault("retries", 0)
        return make_client(url, **kw)

    return made


def test_tsblob_ca_names_the_servers_certificate(make: Any, tls_server: Server, cert: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: the SDK ignored TSBLOB_CA (ops probe 2026-11-29): the CLI trusts the PEM file it
    names, the SDK did not read it, so a program that worked with the CLI's settings failed
    on the certificate. Now both clients read it when no ``ssl_context`` is given; without
    it the error says what to do."""
    with pytest.raises(tsblob.TransportError) as e:
        make(tls_server.url).info()
    assert "ssl_context=" in e.value.message and "TSBLOB_CA" in e.value.message
    monkeypatch.setenv("TSBLOB_CA", str(cert))
    assert make(tls_server.url).info().version
    assert make(tls_server.url.replace("127.0.0.1", "localhost")).health().status == "ok"
    # an ssl_context given wins over the variable
    with pytest.raises(tsblob.TransportError):
        make(tls_server.url, ssl_context=ssl.create_default_context()).info()
    ctx = ssl.create_default_context(cafile=str(cert))
    monkeypatch.delenv("TSBLOB_CA")
    assert make(tls_server.url, ssl_context=ctx).info().version


def test_a_tsblob_ca_that_does_not_load_is_invalid_input(make: Any, tls_server: Server, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: the SDK ignored TSBLOB_CA (ops probe 2026-11-29): a file that is not PEM (or is
    missing) now says so at once, naming the variable."""
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("hello")
    for path in (bad, tmp_path / "missing.pem"):
        monkeypatch.setenv("TSBLOB_CA", str(path))
        with pytest.raises(tsblob.InvalidInput, match="TSBLOB_CA"):
            make(tls_server.url)
    make("http://127.0.0.1:1")  # (read for https:// URLs only)


def test_http_to_a_tls_port_says_to_use_https(make: Any, tls_server: Server) -> None:
    """Bug: an http:// URL to a TLS port failed with a bare BadStatusLine (ops probe
    2026-11-29): the message now says the server may serve TLS, and to use https://."""
    with pytest.raises(tsblob.TransportError) as e:
        make(tls_server.url.replace("https://", "http://")).info()
    assert "may serve TLS" in e.value.message and "https://" in e.value.message


def test_https_to_a_plain_port_says_to_use_http(make: Any, server: Server) -> None:
    """Bug: an https:// URL to a plain-HTTP port failed with a bare SSL "wrong version
    number" (ops probe 2026-11-29): the message now says the server may speak plain HTTP."""
    with pytest.raises(tsblob.TransportError) as e:
        make(server.url.replace("http://", "https://")).info()
    assert "may speak plain HTTP" in e.value.message and "http://" in e.value.message
