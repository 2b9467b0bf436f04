"""What users of reduct-py, minio-py and boto3 expect, against a real ``tsblob serve`` with
both clients: handles, keyword-only options, the vocabulary of the HTTP API and CLI (old
names warn), records read as files (PIL, numpy, shutil), downloads with progress, and
``TSBLOB_URL``/``TSBLOB_TOKEN``."""

from __future__ import annotations

import asyncio
import inspect
import io
import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

import tsblob
from tsblob import Client

from conftest import ADMIN_TOKEN, Server

T0 = 1_700_000_000_000_000


def test_handles_have_the_client_methods_with_names_filled_in(client: Client, bucket: str) -> None:
    b = client.bucket(bucket)
    cam = b.entry("cam/front")
    assert cam.write(b"one", T0, labels={"k": "1"}) == T0
    assert b.write("cam/front", b"two", T0 + 1) == T0 + 1
    assert cam.read(T0).data == b"one" and cam.read().data == b"two"
    assert cam.head(T0 + 1).size == 3
    assert [r.timestamp for r in cam.query(start=T0, eq={"k": "1"})] == [T0]
    assert [(r.entry, r.timestamp) for r in b.query(entries=["cam/*"])] == [("cam/front", T0), ("cam/front", T0 + 1)]
    assert cam.update_labels(T0, {"k": None}).labels == {}
    assert cam.get_entry().record_count == 2 and cam.info().record_count == 2
    assert b.info().info.record_count == 2 and b.get_bucket().name == bucket
    assert b.update_bucket(quota_type="fifo", quota_size=1 << 30).settings.quota_type == "fifo"
    assert cam.histogram(step=timedelta(seconds=1)).total == 2
    assert cam.remove(T0) == 1 and b.remove("cam/front", T0 + 1) == 1
    cam.write_batch([(T0 + 5, b"x")])
    b.remove_entry("cam/front")
    with pytest.raises(tsblob.EntryNotFound):
        cam.info()
    with pytest.raises(tsblob.InvalidInput):
        client.bucket("a/b")
    with pytest.raises(tsblob.InvalidInput):
        b.entry("cam/../x")


def test_handle_signatures_and_docstrings_come_from_the_client() -> None:
    sig = inspect.signature(tsblob.EntryHandle.write)
    assert list(sig.parameters)[:3] == ["self", "data", "ts"]
    assert list(inspect.signature(tsblob.BucketHandle.query).parameters)[:3] == ["self", "entry", "start"]
    assert tsblob.EntryHandle.query.__doc__ == tsblob.Client.query.__doc__
    assert not hasattr(tsblob.EntryHandle, "create_token")  # not an entry's method


def test_every_bucket_and_entry_method_of_the_clients_is_an_explicit_handle_method() -> None:
    """The handles are written out (generated at build time from the client), not added at
    runtime: a type checker sees them. Each has the client method's parameters after the
    bound ones, its return annotation and its docstring."""
    for client, bucket_h, entry_h in ((tsblob.Client, tsblob.BucketHandle, tsblob.EntryHandle),
                                      (tsblob.AsyncClient, tsblob.AsyncBucketHandle, tsblob.AsyncEntryHandle)):
        checked = 0
        for name, method in vars(client).items():
            if name.startswith("_") or not callable(method):
                continue
            sig = inspect.signature(method)
            params = list(sig.parameters)[1:3]
            n = 2 if params == ["bucket", "entry"] else 1 if params[:1] == ["bucket"] else 0
            for k, handle in ((1, bucket_h), (2, entry_h)):
                if k > n:
                    continue
                assert name in vars(handle), f"{handle.__name__} lacks {name}"
                hsig = inspect.signature(vars(handle)[name])
                assert list(hsig.parameters.values())[1:] == list(sig.parameters.values())[1 + k:], name
                assert hsig.return_annotation == sig.return_annotation or name == "read_stream", name
                assert vars(handle)[name].__doc__ == method.__doc__
                checked += 1
        assert checked > 20


def test_options_are_keyword_only(client: Client, bucket: str) -> None:
    with pytest.raises(TypeError):
        client.write(bucket, "e", b"x", T0, {"k": "v"})  # type: ignore[misc]
    with pytest.raises(TypeError):
        client.query(bucket, "e", T0, T0 + 1, {"k": "v"})  # type: ignore[misc]


def test_old_option_names_warn_and_mean_the_same(client: Client, bucket: str) -> None:
    client.write_batch(bucket, "q", [(T0 + i, b"x", {"cam": "a" if i % 2 else "b"}) for i in range(6)])
    new = [r.timestamp for r in client.query(bucket, "q", eq={"cam": "a"}, desc=True)]
    with pytest.warns(DeprecationWarning, match="labels= is deprecated: use eq="):
        assert [r.timestamp for r in client.query(bucket, "q", labels={"cam": "a"}, desc=True)] == new
    with pytest.warns(DeprecationWarning, match="reverse= is deprecated: use desc="):
        assert [r.timestamp for r in client.query(bucket, "q", eq={"cam": "a"}, reverse=True)] == new
    with pytest.warns(DeprecationWarning, match="exclude= is deprecated: use ne="):
        assert len(list(client.query(bucket, "q", exclude={"cam": "a"}))) == 3
    with pytest.warns(DeprecationWarning), pytest.raises(tsblob.InvalidInput, match="not both"):
        client.query(bucket, "q", eq={"cam": "a"}, labels={"cam": "b"})


def test_timestamps_from_numpy_and_timedelta(client: Client, bucket: str) -> None:
    np = pytest.importorskip("numpy")
    assert client.write(bucket, "t", b"a", np.int64(T0)) == T0
    assert client.write(bucket, "t", b"b", np.datetime64(T0 + 1, "us")) == T0 + 1
    t = client.write(bucket, "t", b"c", timedelta(seconds=-30))
    assert abs(t - (time.time_ns() // 1000 - 30_000_000)) < 5_000_000
    assert [r.data for r in client.query(bucket, "t", start=timedelta(minutes=-1))] == [b"c"]
    with pytest.warns(tsblob.TimestampWarning):
        assert client.write(bucket, "t", b"d", int(time.time())) < 2e15  # seconds: stored in 1970, with a warning


def test_a_record_reads_as_a_file(make_client: Callable[..., Client], client: Client, bucket: str,
                                  tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    Image = pytest.importorskip("PIL.Image")
    png = io.BytesIO()
    Image.new("RGB", (32, 16), (200, 10, 10)).save(png, format="PNG")
    arr = np.arange(60_000, dtype=np.float32).reshape(300, 200)
    npy = io.BytesIO()
    np.save(npy, arr)
    client.write(bucket, "f", png.getvalue(), T0, content_type="image/png")
    client.write(bucket, "f", npy.getvalue(), T0 + 1)

    rec = client.read(bucket, "f", T0)
    assert rec.seekable() and Image.open(rec).size == (32, 16)
    rec = client.read(bucket, "f", T0 + 1)
    assert np.array_equal(np.load(rec), arr)

    # Streamed records (above eager_limit): forward-only file objects.
    small = make_client(eager_limit=50)
    for rec in small.query(bucket, "f"):
        assert not rec.loaded and not rec.seekable()
        if rec.timestamp == T0:
            assert Image.open(rec).size == (32, 16)  # PIL reads it whole when it cannot seek
        else:
            head = rec.read(6)
            assert head == b"\x93NUMPY" and rec.tell() == 6
            with pytest.raises(io.UnsupportedOperation):
                rec.seek(0)
            buf = bytearray(10)
            assert rec.readinto(buf) == 10 and rec.tell() == 16
            out = io.BytesIO()
            shutil.copyfileobj(rec, out, 4096)
            assert head + bytes(buf) + out.getvalue() == npy.getvalue()
            assert rec.read() == b""
            with pytest.raises(tsblob.InvalidInput):
                rec.data  # noqa: B018 - part of it was read: .data would be a lie
    # A loaded record seeks and re-reads.
    rec = client.read(bucket, "f", T0 + 1)
    assert rec.read(6) == b"\x93NUMPY" and rec.seek(0) == 0 and rec.read() == npy.getvalue()
    assert rec.seek(-3, 2) == len(npy.getvalue()) - 3 and len(rec.read()) == 3


def test_download_streams_to_a_file_with_progress(client: Client, bucket: str, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 20_000  # 5 MB: several chunks
    client.write(bucket, "v", payload, T0)
    client.write(bucket, "v", b"latest", T0 + 1)
    calls: List[Tuple[int, int]] = []
    info = client.download(bucket, "v", tmp_path / "a.bin", ts=T0, progress=lambda d, t: calls.append((d, t)))
    assert (tmp_path / "a.bin").read_bytes() == payload and info.timestamp == T0 and info.size == len(payload)
    assert len(calls) > 1 and calls[-1] == (len(payload), len(payload))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    client.bucket(bucket).entry("v").download(tmp_path / "b.bin")  # the latest
    assert (tmp_path / "b.bin").read_bytes() == b"latest"
    with client.read_stream(bucket, "v", T0) as rec:
        assert rec.download(tmp_path / "c.bin") == len(payload)
    assert (tmp_path / "c.bin").read_bytes() == payload


def test_tsblob_url_and_token_are_read_from_the_environment(auth_server: Server,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TSBLOB_URL", auth_server.url + "/")
    monkeypatch.setenv("TSBLOB_TOKEN", ADMIN_TOKEN)
    with Client() as db:
        assert db.url == auth_server.url and db.me().full_access

    async def run() -> bool:
        async with tsblob.AsyncClient() as db:
            return (await db.me()).full_access

    assert asyncio.run(run())
    with Client(token="") as anon:  # an explicit empty token: none, whatever the environment says
        with pytest.raises(tsblob.Unauthorized):
            anon.me()
    monkeypatch.delenv("TSBLOB_URL")
    assert Client().url == "http://127.0.0.1:8686"


def test_a_record_reads_lines_as_a_binary_file(make_client: Callable[..., Client], client: Client,
                                               bucket: str) -> None:
    """The sync ``Record`` is a ``typing.BinaryIO`` (``PIL.Image.open`` takes ``IO[bytes]``):
    ``readline``, iteration by lines, ``mode``, ``name``; loaded and streamed alike."""
    text = b"".join(b"line %d\n" % i for i in range(2000)) + b"tail"
    client.write(bucket, "log", text, T0)
    rec = client.read(bucket, "log", T0)
    assert rec.mode == "rb" and rec.name.endswith(f"@{T0}") and not rec.isatty()
    assert rec.readline() == b"line 0\n" and rec.readline(3) == b"lin" and rec.readline() == b"e 1\n"
    assert rec.readlines()[-1] == b"tail" and rec.readline() == b""
    with pytest.raises(io.UnsupportedOperation):
        rec.write(b"x")
    small = make_client(eager_limit=100)
    for rec in small.query(bucket, "log"):
        assert not rec.loaded
        assert rec.readline() == b"line 0\n" and rec.read(4) == b"line"
        lines = list(rec)
        assert lines[0] == b" 1\n" and lines[-1] == b"tail" and len(lines) == 2000
