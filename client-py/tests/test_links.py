"""Query links (issue 28), with both clients: ``create_link`` makes a URL that downloads one
record, or the whole query, without a token; an altered link is refused."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import timedelta
from typing import Dict, Tuple

import tsblob
from tsblob import Client

from conftest import Server

T0 = 1_700_000_000_000_000


def get(url: str) -> Tuple[int, Dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def test_a_link_downloads_a_record_or_a_query_without_a_token(client: Client, bucket: str) -> None:
    e = client.bucket(bucket).entry("cam/front")
    e.write_batch([(T0 + i, b"frame-%d" % i, {"n": str(i)}) for i in range(5)])
    made = client.create_link(bucket, "cam/front", start=T0 + 1, when={"&n": {"$gt": 1}}, index=1,
                              expires_in=timedelta(minutes=5))
    assert made["file_name"] == "front_1.bin"
    status, headers, body = get(made["link"])
    assert (status, body) == (200, b"frame-3")
    assert headers["x-tsblob-ts"] == str(T0 + 3)
    assert headers["x-tsblob-entry"] == "cam/front"
    assert 'filename="front_1.bin"' in headers["content-disposition"]

    made = client.create_link(bucket, ["cam/*"], record=("cam/front", T0 + 2), file_name="shot.bin")
    assert get(made["link"])[2] == b"frame-2"

    made = client.create_link(bucket, "cam/front", stop=T0 + 2)
    status, headers, body = get(made["link"])
    assert status == 200 and headers["content-type"] == "application/x-tsblob-records"
    assert body.count(b"frame-") == 2

    status, _, body = get(made["link"].replace("sig=", "sig=A"))
    assert status == 403 and b"link_signature" in body


def test_a_link_to_a_jpeg_record_made_through_the_api_was_named_bin(client: Client, bucket: str) -> None:
    """The server named a one-record link before reading the record: ``front_0.bin`` for a
    JPEG (only the CLI re-made it with the record's extension)."""
    client.write(bucket, "cam/front", b"\xff\xd8jpeg", ts=T0, content_type="image/jpeg")
    client.write(bucket, "cam/front", b"text", ts=T0 + 1, content_type="text/plain; charset=utf-8")
    made = client.create_link(bucket, "cam/front", index=0)
    assert made["file_name"] == "front_0.jpg"
    status, headers, body = get(made["link"])
    assert (status, body) == (200, b"\xff\xd8jpeg")
    assert 'filename="front_0.jpg"' in headers["content-disposition"]
    made = client.create_link(bucket, ["cam/*"], record=("cam/front", T0 + 1))
    assert made["file_name"] == f"{bucket}_{T0 + 1}.txt"
    # A record the query does not hold (yet): the name keeps .bin, the download says 404.
    made = client.create_link(bucket, "cam/front", index=5)
    assert made["file_name"] == "front_5.bin"
    assert get(made["link"])[0] == 404
    # MCAP exports and whole queries keep their extensions.
    assert client.create_link(bucket, "cam/front", mcap=True)["file_name"] == "front.mcap"
    assert client.create_link(bucket, "cam/front")["file_name"] == "front.bin"


def test_bad_link_requests_raise(client: Client, bucket: str) -> None:
    import pytest

    with pytest.raises(tsblob.InvalidInput):
        client.create_link(bucket, "e", expires_in=10 ** 9)
    with pytest.raises(tsblob.NotFound):
        client.create_link(bucket + "-none", "e")


def test_a_link_file_name_chose_an_active_extension(client: Client, bucket: str) -> None:
    """Bug (hostile probe of 2026-11-29): any token that could read the bucket made a link
    saved as ``evil.html`` (or ``.exe``, ``.svg``, ``.lnk``) from the server's own address,
    and a right-to-left override showed ``a\u202eexe.jpg`` as ``agpj.exe``. A chosen name ends
    in a passive extension, as the default names do."""
    client.bucket(bucket).entry("page").write(b"<script>alert(1)</script>", T0, content_type="text/html")
    for name in ("evil.html", "evil.exe", "a.svg", "evil.html.", "dir/evil.html", "a\u202eexe.jpg"):
        try:
            client.create_link(bucket, "page", index=0, file_name=name)
            raise AssertionError(f"{name!r} was taken")
        except tsblob.InvalidInput as e:
            assert e.status == 422 and e.code == "invalid_link", (name, e)
    made = client.create_link(bucket, "page", index=0, file_name="page.txt")
    status, headers, body = get(made["link"])
    assert (status, body) == (200, b"<script>alert(1)</script>")
    assert 'filename="page.txt"' in headers["content-disposition"]
    assert client.create_link(bucket, "page", index=0)["file_name"] == "page_0.bin"


def test_a_link_whose_token_expired_answered_401_ask_an_administrator(auth_server: Server) -> None:
    """Bug (hostile probe of 2026-11-29): once the token that made a link expired, the
    link's holder (who has no token) got the token holder's 401 ``token_expired`` "ask an
    administrator for a new token". The link has ended: 410 ``link_revoked``, saying why."""
    import json
    import time
    import uuid

    b = "lnk-" + uuid.uuid4().hex[:8]
    with auth_server.client() as admin:
        admin.create_bucket(b)
        admin.write(b, "e", b"x", ts=T0)
        brief = admin.create_token("brief-" + uuid.uuid4().hex[:8], read=[b], expires_at=timedelta(seconds=3))
    started = time.monotonic()
    with Client(auth_server.url, token=brief) as c:
        made = c.create_link(b, "e", index=0)
    assert get(made["link"])[0] == 200
    time.sleep(max(0.0, 3.5 - (time.monotonic() - started)))
    status, _, body = get(made["link"])
    assert status == 410, body
    error = json.loads(body)["error"]
    assert error["code"] == "link_revoked" and "has expired" in error["message"], error
