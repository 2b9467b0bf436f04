"""A TCP proxy between a client and a real ``tsblob serve`` that causes real network faults.

Each connection the proxy accepts takes the next *plan* from its queue (none left: it passes
bytes both ways untouched):

- ``Pass()``: relays both ways;
- ``Cut(after)``: relays, but closes both sides once ``after`` bytes of the server's answer
  went to the client (a connection dropped in the middle of a stream);
- ``LoseAnswer()``: relays the request to the server, waits for the answer to start, then
  closes the client's side without relaying it (the request was processed, its answer lost);
- ``Status(code)``: answers the first request itself with ``code`` (a gateway error of a load
  balancer) and closes, without reaching the server;
- ``Refuse()``: closes at once (a reset before any byte).

``connections`` counts the connections accepted, so a test sees how many attempts a call made.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional, Tuple, Union


@dataclass
class Pass:
    pass


@dataclass
class Cut:
    after: int


@dataclass
class LoseAnswer:
    pass


@dataclass
class Status:
    code: int


@dataclass
class Refuse:
    pass


Plan = Union[Pass, Cut, LoseAnswer, Status, Refuse]
_REASONS = {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 500: "Internal Server Error"}


class Proxy:
    def __init__(self, upstream: str) -> None:
        host, port = upstream.replace("http://", "").rsplit(":", 1)
        self.upstream: Tuple[str, int] = (host, int(port))
        self.plans: Deque[Plan] = deque()
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._open: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def plan(self, *plans: Plan) -> "Proxy":
        with self._lock:
            self.plans.extend(plans)
        return self

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            _close(s)

    # -- internals -------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                plan = self.plans.popleft() if self.plans else Pass()
                self._open.append(client)
            threading.Thread(target=self._serve, args=(client, plan), daemon=True).start()

    def _serve(self, client: socket.socket, plan: Plan) -> None:
        if isinstance(plan, Refuse):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            _close(client)  # linger 0: an RST, as a crashed peer
            return
        if isinstance(plan, Status):
            head_only = _read_head(client).startswith(b"HEAD ")
            body = json.dumps({"error": {"code": "unavailable", "message": "injected by the test proxy"}}).encode()
            head = (f"HTTP/1.1 {plan.code} {_REASONS.get(plan.code, 'Error')}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
            try:
                client.sendall(head if head_only else head + body)
            except OSError:
                pass
            _close(client)
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._open.append(server)
        limit: Optional[int] = plan.after if isinstance(plan, Cut) else None
        lose = isinstance(plan, LoseAnswer)
        threading.Thread(target=_pump, args=(client, server, None, False), daemon=True).start()
        _pump(server, client, limit, lose)


def _read_head(sock: socket.socket) -> bytes:
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
    except OSError:
        pass
    return buf


def _pump(src: socket.socket, dst: socket.socket, limit: Optional[int], lose: bool) -> None:
    """Copies ``src`` to ``dst`` until either side closes; with ``limit``, closes both after
    that many bytes; with ``lose``, closes both when the first bytes arrive, relaying none."""
    sent = 0
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if lose:
                break
            if limit is not None and sent + len(data) >= limit:
                dst.sendall(data[:limit - sent])
                break
            dst.sendall(data)
            sent += len(data)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
