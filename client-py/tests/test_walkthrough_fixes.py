"""Regression tests of the Python SDK documentation walkthrough: each test names its bug."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Set
from urllib.parse import quote

import pytest

import tsblob
from tsblob import Client
from tsblob import _common as c
from tsblob._errors import _BY_CODE, error_from_response_body

from conftest import REPO, Server

SRC = Path(tsblob.__file__).parent


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- 1. put_replication(from_ts=...) skipped the timestamp conversion -----------------------

def test_put_replication_from_ts_skipped_the_timestamp_conversion(client: Client, bucket: str) -> None:
    """Bug: ``put_replication(..., from_ts=...)`` sent ``int(from_ts)``: ``from_ts=1.7e9``
    (seconds) became a backfill from 1700000000 µs (1970: the whole bucket) with no
    TimestampWarning, and ``from_ts="now-1h"`` raised a bare ValueError. It takes every form
    a ``ts`` takes now."""
    name = uniq("py-from")
    try:
        task = client.put_replication(name, bucket, "http://127.0.0.1:9", "x", mode="paused", from_ts=1.7e9)
        assert task["settings"]["from"] == 1_700_000_000_000_000
        before = time.time_ns() // 1000
        task = client.put_replication(name, bucket, "http://127.0.0.1:9", "x", mode="paused", from_ts="now-1h")
        assert abs(task["settings"]["from"] - (before - 3_600_000_000)) < 60_000_000
        with pytest.warns(tsblob.TimestampWarning, match="looks like seconds"):
            client.put_replication(name, bucket, "http://127.0.0.1:9", "x", mode="paused", from_ts=1_700_000_000)
        with pytest.raises(tsblob.InvalidInput) as e:
            client.put_replication(name, bucket, "http://127.0.0.1:9", "x", mode="paused", from_ts="yesterday")
        assert e.value.code == "invalid_timestamp" and e.value.status is None
    finally:
        client.remove_replication(name)


# -- 2. handles took names the server refuses -----------------------------------------------

BAD_BUCKETS = ["bad name!", "a" * 65, "é", "index", "tokens", ".hidden", "index.old", "..", "a/b", "", "a\nb"]
BAD_ENTRIES = ["bad name!", "cam/front cam", "cam/query", "info", "settings", "cam/attachments/x", "a//b",
               "cam/..", "x" * 256, "a/" * 100 + "b", "cam\\front", ""]
GOOD_BUCKETS = ["a.b-c_d", "A" * 64, "robot1", "indexer", "x.index"]
GOOD_ENTRIES = ["cam/front", "query/x", "settings/x", "a.b/c-d_e", "e" * 255, "Info"]


def test_a_bad_bucket_or_entry_name_was_taken_by_the_handle(client: Client) -> None:
    """Bug: ``db.bucket("bad name!")`` and ``.entry("bad name!")`` returned handles (only "",
    "a/b" and ".." were refused); the server refused the name later (422 invalid_name). The
    handles apply the server's rules (proto/src/names.rs) now, with its explanation."""
    for name in BAD_BUCKETS:
        with pytest.raises(tsblob.InvalidInput) as e:
            client.bucket(name)
        assert e.value.code == "invalid_name" and e.value.status is None, name
    b = client.bucket("robot1")
    for name in BAD_ENTRIES:
        with pytest.raises(tsblob.InvalidInput) as e:
            b.entry(name)
        assert e.value.code == "invalid_name" and e.value.status is None, name
    for name in GOOD_BUCKETS:
        client.bucket(name)
    for name in GOOD_ENTRIES:
        b.entry(name)
    # As clear as the server's messages.
    with pytest.raises(tsblob.InvalidInput, match=r"bucket name 'bad name!' contains ' ', which is not allowed: "
                                                  r"use letters, digits, '-', '_' and '\.'"):
        client.bucket("bad name!")
    with pytest.raises(tsblob.InvalidInput, match=r"entry name 'cam/query' uses the reserved word 'query'"):
        b.entry("cam/query")
    with pytest.raises(tsblob.InvalidInput, match=r"bucket name 'a{65}' is longer than 64 bytes"):
        client.bucket("a" * 65)


def test_a_dot_bucket_was_said_to_use_itself_as_a_reserved_word(client: Client) -> None:
    """Bug: ``.x`` was refused as "uses the reserved word '.x'" (the name itself), by the
    server and by the handle alike; both name the reserved prefix now."""
    with pytest.raises(tsblob.InvalidInput, match=r"bucket name '\.x' starts with '\.', which the data folder keeps"):
        client.bucket(".x")
    with pytest.raises(tsblob.InvalidInput) as e:
        client._json("GET", "/api/v1/b/.x")
    assert e.value.status == 422 and 'starts with \".\", which the data folder keeps' in str(e.value)


def test_the_client_name_rules_are_the_server_rules(client: Client, bucket: str) -> None:
    """The names the client refuses are the ones the server refuses, and the other way round
    (names that keep their path: no '/' in a bucket name, no empty or dot segment)."""
    for name in [n for n in BAD_BUCKETS if n and "/" not in n and n not in (".", "..")]:
        with pytest.raises(tsblob.InvalidInput) as e:
            client._json("GET", f"/api/v1/b/{quote(name, safe='')}")
        assert e.value.code == "invalid_name" and e.value.status == 422, name
    for name in [n for n in BAD_ENTRIES if n and "//" not in n and ".." not in n and "\\" not in n]:
        if name.split("/")[-1] in c.RESERVED_ENTRY_WORDS or "attachments" in name.split("/"):
            continue  # (a route of the entry before it, not a record's path)
        with pytest.raises(tsblob.InvalidInput) as e:
            client._send("POST", f"/api/v1/b/{bucket}/{quote(name, safe='/')}", [("ts", "1")], content=b"x")
        assert e.value.code == "invalid_name" and e.value.status == 422, name
    for name in GOOD_BUCKETS:
        if name not in ("robot1",):
            client.create_bucket(name, exist_ok=True)
            client.remove_bucket(name)
    for i, name in enumerate(GOOD_ENTRIES):
        client.bucket(bucket).entry(name).write(b"x", ts=1 + i)
    assert sorted(e.name for e in client.get_bucket(bucket).entries) == sorted(GOOD_ENTRIES)


# -- 3. quota_type and compression were only checked by the server ---------------------------

def test_bad_quota_type_or_compression_was_sent_to_the_server(client: Client, bucket: str) -> None:
    """Bug: the guide says a bad setting raises InvalidInput "before anything is sent", but
    ``quota_type="lifo"`` and ``compression="gzip"`` went to the server (422). The client
    checks them now, with the server's accepted values (storage/src/settings.rs)."""
    name = uniq("b")
    for kw in [{"quota_type": "lifo"}, {"compression": "gzip"}, {"compression": "zstd:23"},
               {"compression": "ZSTD"}, {"compression": "zstd:0"}, {"quota_type": 1}]:
        with pytest.raises(tsblob.InvalidInput) as e:
            client.create_bucket(name, **kw)
        assert e.value.code == "invalid_settings" and e.value.status is None, kw
        assert "checked by the client" in e.value.message
        with pytest.raises(tsblob.InvalidInput) as e:
            client.update_bucket(bucket, **kw)
        assert e.value.status is None, kw
    # What the server takes passes (quota_type in any case, zstd levels 1 to 22).
    for qt, comp in [("FIFO", "zstd:22"), ("hard", "zstd:1"), ("none", "zstd"), ("Fifo", "none"), ("fifo", "zstd:+9")]:
        s = client.update_bucket(bucket, quota_type=qt, quota_size="1GiB", compression=comp).settings
        assert (s.quota_type, s.compression) == (qt.lower(), {"zstd": "zstd:3", "zstd:+9": "zstd:9"}.get(comp, comp))


# -- 7. the last_token message gave HTTP advice ----------------------------------------------

LAST_TOKEN = ("\"boss\" is the last token and the server has no --token admin token: removing it would switch "
              "authentication off and open every route to anyone. Create another token first, or confirm with "
              "DELETE /api/v1/tokens/boss?disable_auth=true")


def test_last_token_error_said_to_send_an_http_delete() -> None:
    """Bug: the 409 ``last_token`` error told an SDK user to "confirm with DELETE
    /api/v1/tokens/boss?disable_auth=true"; it says ``remove_token('boss', disable_auth=True)``
    now (as the CLI names its own command)."""
    body = ('{"error": {"code": "last_token", "message": %s}}' % __import__("json").dumps(LAST_TOKEN)).encode()
    e = error_from_response_body(409, body)
    assert isinstance(e, tsblob.Conflict) and e.code == "last_token"
    assert e.message.startswith("\"boss\" is the last token")
    assert e.message.endswith("or confirm with remove_token('boss', disable_auth=True)"), e.message
    assert "DELETE" not in e.message


def test_last_token_error_from_a_real_server(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", []).start()
    try:
        with srv.client(token="") as open_db:
            value = open_db.create_token("boss", full_access=True)
        with srv.client(token=value) as db:
            with pytest.raises(tsblob.Conflict) as e:
                db.remove_token("boss")
            assert e.value.code == "last_token"
            assert "remove_token('boss', disable_auth=True)" in e.value.message, e.value.message
            db.remove_token("boss", disable_auth=True)
    finally:
        srv.stop()


# -- 8. an AsyncClient reused in a second asyncio.run ---------------------------------------

def test_async_client_in_a_second_asyncio_run_gave_event_loop_is_closed(server: Server) -> None:
    """Bug: an AsyncClient used in one ``asyncio.run`` and again in a second failed with a
    bare ``RuntimeError: Event loop is closed``; it says to make one client per event loop."""
    db = tsblob.AsyncClient(server.url)

    async def health() -> str:
        return (await db.health()).status

    assert asyncio.run(health()) == "ok"
    with pytest.raises(RuntimeError, match="make one AsyncClient per event loop") as e:
        asyncio.run(health())
    assert "now closed" in str(e.value)
    # Closed (its loop gone: nothing to close there), it opens anew in the running loop.
    asyncio.run(db.aclose())

    async def health_and_close() -> str:
        try:
            return await health()
        finally:
            await db.aclose()

    assert asyncio.run(health_and_close()) == "ok"


# -- 9. retry warnings printed without logging configured ------------------------------------

def test_retry_warnings_printed_to_stderr_without_logging_configured() -> None:
    """Bug: the guide says retry WARNINGs show when a program calls ``logging.basicConfig()``,
    but Python's last-resort handler printed them to stderr without it. The package adds a
    ``NullHandler`` to the ``tsblob`` logger (the library convention)."""
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("tsblob").handlers)
    code = "import logging, tsblob; logging.getLogger('tsblob').warning('GET /x: retry 1 of 3')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == ""
    code = "import logging, tsblob; logging.basicConfig(); logging.getLogger('tsblob').warning('GET /x: retry 1 of 3')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "WARNING:tsblob:GET /x: retry 1 of 3" in out.stderr


# -- 10. InvalidInput codes the errors table did not list -------------------------------------

def _codes_raised_as_invalid_input() -> Set[str]:
    codes = {code for code, cls in _BY_CODE.items() if issubclass(cls, tsblob.InvalidInput)}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "InvalidInput":
                for kw in node.keywords:
                    if kw.arg == "code" and isinstance(kw.value, ast.Constant):
                        codes.add(kw.value.value)
    return codes


def test_remove_without_ts_raised_a_code_the_errors_table_did_not_list(client: Client, bucket: str) -> None:
    """Bug: ``remove()`` without ``ts`` raised InvalidInput with code ``bad_request``, but the
    errors table of docs/python.md gave InvalidInput only ``invalid_*`` codes. The table lists
    every code InvalidInput is raised with (by the server's mapping or the client's checks)."""
    with pytest.raises(tsblob.InvalidInput) as e:
        client.remove(bucket, "e")
    assert e.value.code == "bad_request" and e.value.status is None
    doc = (REPO / "docs" / "python.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `InvalidInput` |"))
    listed = set(re.findall(r"`([a-z_]+)`", row))
    codes = _codes_raised_as_invalid_input()
    assert "bad_request" in codes and "invalid_name" in codes
    assert codes <= listed, f"codes InvalidInput is raised with that docs/python.md's errors table lacks: {codes - listed}"
