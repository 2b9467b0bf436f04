"""The sync transport's scatter/gather send (``_http._send_gathered``, issue 15): a request's
head and its bytes-like body leave in one ``sendmsg`` without being joined, and whatever the
socket did not take goes out with ``sendall`` from where it stopped. A socket pair with a
small send buffer and a slow reader forces both partial cases (the head cut, the body cut);
the bytes read on the other end must be exactly head + body."""

from __future__ import annotations

import socket
import threading
from typing import List

import pytest

from tsblob._http import _send_gathered


def _drain(sock: socket.socket, out: List[bytes]) -> None:
    while True:
        chunk = sock.recv(7000)  # small reads: the sender meets a full buffer again and again
        if not chunk:
            return
        out.append(chunk)


@pytest.mark.parametrize("head_len,body_len", [(100, 3_000_000), (60_000, 50), (60_000, 2_000_000), (10, 0)])
def test_head_and_body_arrive_whole_after_partial_sends(head_len: int, body_len: int) -> None:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the kernel's minimum: partial sends
    a.settimeout(10)  # as the transport's sockets: non-blocking underneath
    head = bytes(i % 7 for i in range(head_len))
    body = memoryview(bytearray(i % 251 for i in range(body_len)))
    got: List[bytes] = []
    reader = threading.Thread(target=_drain, args=(b, got))
    reader.start()
    try:
        _send_gathered(a, head, body)
    finally:
        a.shutdown(socket.SHUT_WR)
        reader.join(10)
        a.close()
        b.close()
    assert b"".join(got) == head + bytes(body)


def test_items_larger_than_a_byte_are_counted_in_bytes() -> None:
    import array

    a, b = socket.socketpair()
    ints = array.array("q", range(1000))  # 8,000 bytes in 1,000 items
    try:
        _send_gathered(a, b"H", memoryview(ints))
        a.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := b.recv(65536):
            got += chunk
    finally:
        a.close()
        b.close()
    assert got == b"H" + ints.tobytes()
