"""Retries seen in the logs and in the final error, a write without ``ts`` that may have been
stored, and the proxy variables of the environment (issue 31). Both clients."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Callable, Iterator

import pytest

import tsblob
from tsblob import Client, Retry

from conftest import Server
from http_proxy import HttpProxy, TlsFront, self_signed
from proxy import LoseAnswer, Proxy, Status

T0 = 1_700_000_000_000_000
FAST = Retry(attempts=2, backoff=0.01)


def test_retries_were_silent_and_the_final_error_did_not_count_them(
        make_client: Callable[..., Client], bucket: str, proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    db = make_client(proxy.url, retries=FAST)
    proxy.plan(Status(503), Status(503), Status(503))
    with caplog.at_level(logging.WARNING, logger="tsblob"):
        with pytest.raises(tsblob.TsblobError) as e:
            db.get_bucket(bucket)
    assert e.value.status == 503 and e.value.attempts == 2
    assert "gave up after 3 attempts" in str(e.value)
    retries = [r for r in caplog.records if r.name == "tsblob"]
    assert [r.levelno for r in retries] == [logging.WARNING] * 2
    assert "answered 503; retry 1 of 2" in retries[0].getMessage() and f"/b/{bucket}" in retries[0].getMessage()
    # A call that succeeds on a retry logs the retry and returns.
    caplog.clear()
    proxy.plan(Status(502))
    with caplog.at_level(logging.WARNING, logger="tsblob"):
        assert db.get_bucket(bucket).name == bucket
    assert len([r for r in caplog.records if r.name == "tsblob"]) == 1


def test_a_write_without_ts_that_lost_its_answer_did_not_say_it_may_be_stored(
        make_client: Callable[..., Client], client: Client, bucket: str, proxy: Proxy) -> None:
    db = make_client(proxy.url, retries=FAST)
    proxy.plan(LoseAnswer())
    with pytest.raises(tsblob.TransportError, match="may have been stored") as e:
        db.write(bucket, "e", b"x")
    assert e.value.attempts == 0  # never retried
    assert client.get_entry(bucket, "e").record_count == 1  # and it was stored
    # A server that cannot be reached saw nothing: no such note.
    with pytest.raises(tsblob.TransportError) as e2:
        make_client("http://127.0.0.1:9", retries=0).write(bucket, "e", b"x")
    assert "may have been stored" not in str(e2.value)


@pytest.fixture
def http_proxy() -> Iterator[HttpProxy]:
    p = HttpProxy()
    yield p
    p.close()


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
              "all_proxy"):
        monkeypatch.delenv(k, raising=False)


def test_http_proxy_and_no_proxy_were_ignored(make_client: Callable[..., Client], server: Server, bucket: str,
                                              http_proxy: HttpProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", http_proxy.url.replace("http://", "http://robot:s%3Acret@"))
    db = make_client()
    assert db.write(bucket, "p", b"via the proxy", T0) == T0
    assert db.read(bucket, "p", T0).data == b"via the proxy"
    assert [r.data for r in db.query(bucket, "p")] == [b"via the proxy"]
    assert http_proxy.lines[0] == f"POST {server.url}/api/v1/b/{bucket}/p?ts={T0} HTTP/1.1"
    assert len(http_proxy.lines) == 3 and all(ln.split()[1].startswith(server.url) for ln in http_proxy.lines)
    assert http_proxy.auth[0] == "Basic cm9ib3Q6czpjcmV0"  # robot:s:cret
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert make_client().read(bucket, "p", T0).data == b"via the proxy"
    assert len(http_proxy.lines) == 3  # bypassed


def test_https_proxy_was_ignored_now_a_connect_tunnel(make_client: Callable[..., Client], server: Server, bucket: str,
                                             http_proxy: HttpProxy, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    files = self_signed(str(tmp_path))
    if files is None:
        pytest.skip("no openssl command to make a certificate")
    front = TlsFront(server.url, *files)
    try:
        _clear_proxy_env(monkeypatch)
        monkeypatch.setenv("HTTPS_PROXY", http_proxy.url)
        ctx = ssl.create_default_context(cafile=files[0])
        db = make_client(front.url, ssl_context=ctx)
        assert db.write(bucket, "tls", b"end to end", T0) == T0
        assert db.read(bucket, "tls").data == b"end to end"
        port = front.url.rsplit(":", 1)[1]
        # (http.client says HTTP/1.0 in its CONNECT line, aiohttp HTTP/1.1)
        assert http_proxy.lines and all(ln.startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.") for ln in http_proxy.lines)
    finally:
        front.close()
