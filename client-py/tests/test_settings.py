"""Every bucket setting from the SDK (issue 31): sizes and durations as strings, checked
before sending; ``exist_ok`` that warns (or raises) when the bucket has other settings."""

from __future__ import annotations

import uuid
import warnings
from datetime import timedelta
from typing import Iterator

import pytest

import tsblob
from tsblob import Client
from tsblob._common import parse_duration, parse_size


@pytest.fixture
def name(client: Client) -> Iterator[str]:
    n = f"s-{uuid.uuid4().hex[:12]}"
    yield n
    try:
        client.remove_bucket(n)
    except tsblob.NotFound:
        pass


def test_sizes_use_the_server_units() -> None:
    assert parse_size("24MiB") == 24 << 20 and parse_size("1KB") == 1000 and parse_size("1KiB") == 1024
    assert parse_size("10 GB") == 10_000_000_000 and parse_size("64K") == 64 << 10 and parse_size("1kib") == 1024
    assert parse_size(4096) == 4096 and parse_size("512 B") == 512


def test_durations_use_the_server_units() -> None:
    assert parse_duration("30d") == 30 * 86_400_000_000 and parse_duration("90s") == 90_000_000
    assert parse_duration("1h 30m") == 5_400_000_000 and parse_duration(timedelta(minutes=2)) == 120_000_000
    assert parse_duration(5) == 5


@pytest.mark.parametrize("kw", [{"quota_size": "1.5GB"}, {"quota_size": "12 parsecs"}, {"max_block_size": "MB"},
                                {"quota_size": -1}, {"max_age": "soon"}, {"max_age": "0s"}, {"tier_after": 1.5},
                                {"tier_local_max": "1 iB"}, {"max_block_records": 0}])
def test_a_size_string_got_serdes_expected_u64_now_a_value_error_before_sending(kw: dict) -> None:
    # Port 9 (discard) is closed: a request would be a TransportError, not a ValueError.
    with Client("http://127.0.0.1:9", retries=0) as db:
        with pytest.raises(ValueError, match=f"{next(iter(kw))}=.*checked by the client") as e:
            db.create_bucket("x", **kw)
        assert isinstance(e.value, tsblob.InvalidInput) and e.value.code == "invalid_settings"
        assert "expected u64" not in str(e.value)
        with pytest.raises(ValueError):
            db.update_bucket("x", **kw)


def test_max_age_and_tier_settings_were_unreachable_from_the_sdk(client: Client, name: str) -> None:
    b = client.create_bucket(name, quota_type="fifo", quota_size="1GiB", max_block_size="24MiB",
                             max_block_records=5000, compression="zstd", max_age="30d",
                             tier_local_max="10GB", tier_after="90s")
    s = b.settings
    assert (s.quota_type, s.quota_size, s.max_block_size, s.max_block_records, s.compression) == (
        "fifo", 1 << 30, 24 << 20, 5000, "zstd:3")
    assert (s.max_age, s.tier_local_max, s.tier_after) == (30 * 86_400_000_000, 10_000_000_000, 90_000_000)
    assert client.get_bucket(name).settings == s
    s2 = client.bucket(name).update_bucket(max_age=timedelta(hours=12), tier_after="none").settings
    assert (s2.max_age, s2.tier_local_max, s2.tier_after, s2.quota_size) == (
        12 * 3_600_000_000, 10_000_000_000, None, 1 << 30)
    s3 = client.update_bucket(name, max_age="none", tier_local_max="none").settings
    assert (s3.max_age, s3.tier_local_max) == (None, None)


def test_exist_ok_returned_a_bucket_with_other_settings_silently(client: Client, name: str) -> None:
    client.create_bucket(name)
    with pytest.warns(tsblob.SettingsMismatch, match=r"quota_type 'fifo' asked, 'none' stored.*update_bucket"):
        b = client.create_bucket(name, quota_type="fifo", quota_size="1GiB", exist_ok=True)
    assert b.settings.quota_type == "none"  # left as it was
    with pytest.raises(tsblob.SettingsMismatchError) as e:
        client.create_bucket(name, quota_type="hard", quota_size="1GB", exist_ok=True, strict=True)
    assert e.value.differences == {"quota_type": ("hard", "none"), "quota_size": (1_000_000_000, 0)}
    assert isinstance(e.value, ValueError)
    # The same settings (in other units, or the defaults): no warning.
    client.update_bucket(name, quota_type="fifo", quota_size=1 << 30, compression="zstd:3", max_age="1d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.create_bucket(name, quota_type="FIFO", quota_size="1GiB", compression="zstd", max_age="24h",
                             exist_ok=True, strict=True)
        client.create_bucket(name, exist_ok=True)
