"""A tiny forward HTTP proxy for the tests of ``HTTP_PROXY``/``HTTPS_PROXY``: absolute-URI
requests (``GET http://host:port/path HTTP/1.1``) are sent on to their host, one request a
connection (``connection: close``); ``CONNECT host:port`` opens a tunnel. ``lines`` keeps
every request line received, ``auth`` every ``Proxy-Authorization`` header."""

from __future__ import annotations

import socket
import threading
from typing import List, Optional, Tuple
from urllib.parse import urlsplit

from proxy import _close, _pump, _read_head


class HttpProxy:
    def __init__(self) -> None:
        self.lines: List[str] = []
        self.auth: List[Optional[str]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        raw = _read_head(client)
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = [ln.split(":", 1) for ln in lines[1:] if ":" in ln]
        self.lines.append(lines[0])
        self.auth.append(next((v.strip() for k, v in headers if k.lower() == "proxy-authorization"), None))
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            threading.Thread(target=_pump, args=(client, upstream, None, False), daemon=True).start()
            _pump(upstream, client, None, False)
            return
        url = urlsplit(target)
        if not url.scheme:  # not a proxy request
            client.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            _close(client)
            return
        length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
        while len(rest) < length:
            data = client.recv(65536)
            if not data:
                break
            rest += data
        kept = [f"{k}:{v}" for k, v in headers
                if k.lower() not in ("connection", "proxy-authorization", "proxy-connection")]
        path = url.path + (f"?{url.query}" if url.query else "")
        out = "\r\n".join([f"{method} {path} {version}", *kept, "connection: close", "", ""]).encode("latin-1")
        upstream = socket.create_connection((url.hostname or "", url.port or 80))
        upstream.sendall(out + rest)
        _pump(upstream, client, None, False)


def self_signed(tmp: str) -> Optional[Tuple[str, str]]:
    """(cert, key) files for 127.0.0.1, made with the openssl command (None without it)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        return None
    cert, key = f"{tmp}/cert.pem", f"{tmp}/key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TlsFront:
    """TLS in front of a plain-HTTP server (a TLS-terminating load balancer)."""

    def __init__(self, upstream: str, cert: str, key: str) -> None:
        import ssl

        host, port = upstream.replace("http://", "").rsplit(":", 1)
        self.upstream = (host, int(port))
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(cert, key)
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self._ctx.wrap_socket(raw, server_side=True)
        except OSError:
            _close(raw)
            return
        upstream = socket.create_connection(self.upstream)
        threading.Thread(target=_pump, args=(client, upstream, None, False), daemon=True).start()
        _pump(upstream, client, None, False)
