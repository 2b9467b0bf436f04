"""``to_pandas()`` and ``to_numpy()`` (the extra ``tsblob[pandas]``), issue 31."""

from __future__ import annotations

import io
import time

import pytest

import tsblob
from tsblob import Client

T0 = 1_700_000_000_000_000


def test_to_pandas_gives_a_frame_of_metadata(client: Client, bucket: str) -> None:
    pd = pytest.importorskip("pandas")
    e = client.bucket(bucket).entry("cam/front")
    e.write(b"a" * 10, T0, labels={"site": "bay 4", "alarm": True}, content_type="image/jpeg")
    e.write(b"b" * 20, T0 + 1_500_000, labels={"site": "bay 5", "size": "big"})
    client.write(bucket, "imu", b"c", T0 + 1)
    df = e.query().to_pandas()
    assert list(df.columns) == ["ts", "entry", "size", "content_type", "alarm", "site", "label.size"]
    assert str(df["ts"].dtype) == "datetime64[us, UTC]"
    assert df["ts"].iloc[1] == pd.Timestamp(T0 + 1_500_000, unit="us", tz="UTC")
    assert df["size"].tolist() == [10, 20] and str(df["size"].dtype) == "int64"
    assert df["content_type"].tolist() == ["image/jpeg", "application/octet-stream"]
    assert df["alarm"].tolist() == ["true", None] and df["label.size"].tolist() == [None, "big"]
    merged = client.query(bucket, entries=["**"], meta=True).to_pandas()
    assert merged["entry"].tolist() == ["cam/front", "imu", "cam/front"]
    empty = client.query(bucket, "imu", start=T0 + 10).to_pandas()
    assert list(empty.columns) == ["ts", "entry", "size", "content_type"] and len(empty) == 0
    assert str(empty["ts"].dtype) == "datetime64[us, UTC]"
    assert tsblob.to_pandas([client.head(bucket, "imu")])["size"].tolist() == [1]


def test_to_numpy_reads_npy_and_raw_payloads(client: Client, bucket: str) -> None:
    np = pytest.importorskip("numpy")
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = io.BytesIO()
    np.save(buf, arr)
    client.write(bucket, "a", buf.getvalue(), T0)
    client.write(bucket, "a", arr.tobytes(), T0 + 1)
    assert np.array_equal(client.read(bucket, "a", T0).to_numpy(), arr)
    assert np.array_equal(client.read(bucket, "a", T0 + 1).to_numpy(np.float32, (3, 4)), arr)
    client.write(bucket, "a", b"12345", T0 + 2)
    with pytest.raises(tsblob.InvalidInput, match="whole number"):
        client.read(bucket, "a", T0 + 2).to_numpy(np.float32)


def test_now_minus_5m_worked_in_the_cli_but_not_in_the_sdk(client: Client, bucket: str) -> None:
    now = time.time_ns() // 1000
    t = client.write(bucket, "n", b"x", "now-5m")
    assert abs(t - (now - 300_000_000)) < 5_000_000
    client.write(bucket, "n", b"y", "now")
    assert [r.data for r in client.query(bucket, "n", start="now-1m")] == [b"y"]
    assert [r.data for r in client.query(bucket, "n", "now-10m", "now-4m")] == [b"x"]
    with pytest.raises(tsblob.InvalidInput, match="now-5m"):
        client.write(bucket, "n", b"z", "now-5 parsecs")
