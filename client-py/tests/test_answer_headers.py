"""The sync transport's answer-header parser (``_http._parse_headers``, issue 30): the standard
library hands every header block to the email package's feed parser (some 20 µs of a 1 KB
write's client CPU); plain ``Name: value`` lines are now stored directly, and anything else
goes to that parser. Whatever the block, the message must be the one the standard library
builds: same fields in the same order, same values (blanks kept where it keeps them), same
body and defects."""

from __future__ import annotations

import email.parser
import http.client
import io
import random
from typing import Any

import pytest

from tsblob._http import _HTTPResponse, _parse_headers


def _shape(msg: Any) -> Any:
    return (type(msg), msg.items(), msg.get_payload(), [type(d) for d in msg.defects], msg.get_unixfrom(),
            msg.policy, msg.get("content-length"), msg.get_content_type())


BLOCKS = [
    b"content-type: application/json\r\nx-tsblob-ts: 1\r\ncontent-length: 23\r\n\r\n{\"ts\": 1}",
    b"A: b  \r\nB:c\r\nC:\t x \t\r\n\r\n",  # blanks after the value are kept, before it dropped
    b"A: b\nB: c\n\n",  # bare LF line ends
    b"A: b\r\n folded\r\nB: c\r\n\r\n",  # obsolete line folding: the email parser's
    b"From x\r\nA: b\r\n\r\n",  # a mailbox "From " line
    b"A: b\rc\r\n\r\n",  # a bare CR splits the line for the email parser
    b": x\r\nA: b\r\n\r\n",  # no name
    b"bad line\r\nA: b\r\n\r\n",  # no colon
    b"A: b\r\nB: c",  # the stream ended inside the block
    b"",
    b"\r\n",
    b"A: caf\xe9\r\nB: \x85x\r\n\r\n",  # Latin-1 bytes, a NEL that is no line end here
    b"A : b\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",  # a blank in a name, repeated fields
]


@pytest.mark.parametrize("block", BLOCKS)
def test_answer_headers_parse_as_the_standard_library_parses_them(block: bytes) -> None:
    assert _shape(_parse_headers(io.BytesIO(block))) == _shape(http.client.parse_headers(io.BytesIO(block)))


def test_random_header_blocks_parse_as_the_standard_library_parses_them() -> None:
    rnd = random.Random(30)
    pieces = [b"A", b":", b" ", b"\t", b"\r", b"\n", b"\r\n", b"x", b"\xe9", b"From ", b"\x85", b"\x00", b"\x0b"]
    for _ in range(20_000):
        block = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 16)))
        assert _shape(_parse_headers(io.BytesIO(block))) == _shape(http.client.parse_headers(io.BytesIO(block))), block


def test_sync_writes_read_their_answers_without_the_email_parser(server: Any, bucket: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert _HTTPResponse.begin is not http.client.HTTPResponse.begin  # this Python's begin was rebound

    def refuse(*a: Any, **kw: Any) -> None:
        raise AssertionError("the email parser was used for a plain answer")

    with server.client() as db:
        db.write(bucket, "hdr", b"warm", ts=1)  # the connection is open before the parser is refused
        monkeypatch.setattr(email.parser.Parser, "parsestr", refuse)
        assert db.write(bucket, "hdr", b"x" * 1000, ts=2, labels={"k": "v w"}) == 2
        rec = db.read(bucket, "hdr", 2)
    assert (rec.timestamp, rec.labels, rec.data) == (2, {"k": "v w"}, b"x" * 1000)
