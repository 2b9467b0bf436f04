"""Every accepted timestamp form converts to the exact microsecond, every bad one is refused."""

from __future__ import annotations

import time
import warnings
from datetime import date, datetime, timedelta, timezone

import pytest

from tsblob import InvalidInput, TimestampWarning, from_micros, to_micros

US = 1_714_564_800_123_456  # 2024-05-01T12:00:00.123456Z


@pytest.mark.parametrize("value", [
    US,
    1_714_564_800.123456,
    datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc),
    datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
    datetime(2024, 5, 1, 12, 0, 0, 123456),  # naive = UTC
    "2024-05-01T12:00:00.123456Z",
    "2024-05-01T12:00:00.123456+00:00",
    "2024-05-01T14:00:00.123456+02:00",
    "2024-05-01T12:00:00.123456",
    "2024-05-01 12:00:00.123456z",
])
def test_forms_of_the_same_instant(value: object) -> None:
    assert to_micros(value) == US  # type: ignore[arg-type]


def test_short_fractions_and_dates() -> None:
    assert to_micros("2024-05-01T12:00:00.5Z") == 1_714_564_800_500_000
    assert to_micros("2024-05-01T12:00:00Z") == 1_714_564_800_000_000
    assert to_micros("2024-05-01T12:00:00.1234567Z") == 1_714_564_800_123_456  # truncated to µs
    assert to_micros(date(2024, 5, 1)) == 1_714_521_600_000_000
    assert to_micros(0) == 0
    assert to_micros(0.0) == 0


def test_float_seconds_round_to_the_nearest_microsecond() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 s: still 300000 µs.
    assert to_micros(0.1 + 0.2) == 300_000


def test_round_trip_through_datetime() -> None:
    dt = from_micros(US)
    assert dt.tzinfo is timezone.utc
    assert to_micros(dt) == US
    assert dt.microsecond == 123456


@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), "yesterday", "2024-13-01", True,
                                 None, b"123", 2**64, datetime(1969, 12, 31, tzinfo=timezone.utc)])
def test_bad_values_are_refused_with_a_reason(bad: object) -> None:
    with pytest.raises(InvalidInput) as info:
        to_micros(bad)  # type: ignore[arg-type]
    assert info.value.code == "invalid_timestamp"
    assert repr(bad)[:10] in str(info.value) or "timestamp" in str(info.value)


def test_numpy_values() -> None:
    np = pytest.importorskip("numpy")
    assert to_micros(np.int64(US)) == US and to_micros(np.uint64(US)) == US
    assert to_micros(np.float64(1_714_564_800.5)) == 1_714_564_800_500_000
    assert to_micros(np.float32(2.0)) == 2_000_000
    assert to_micros(np.datetime64("2024-05-01T12:00:00.123456789", "ns")) == US  # truncated to µs
    assert to_micros(np.datetime64("2024-05-01T12:00:00", "s")) == US - 123_456
    assert to_micros(np.datetime64("2024-05-01", "D")) == to_micros(date(2024, 5, 1))
    assert [to_micros(x) for x in np.array([1, 2, 3], dtype=np.int64)] == [1, 2, 3]
    with pytest.raises(InvalidInput, match="NaT"):
        to_micros(np.datetime64("NaT", "us"))
    with pytest.raises(InvalidInput, match="before 1970"):
        to_micros(np.int64(-5))


def test_a_timedelta_is_relative_to_now() -> None:
    before = time.time_ns() // 1000
    got = to_micros(timedelta(minutes=-5))
    after = time.time_ns() // 1000
    assert before - 300_000_000 <= got <= after - 300_000_000
    assert abs(to_micros(timedelta(0)) - time.time_ns() // 1000) < 1_000_000


@pytest.mark.parametrize("value, unit, means", [
    (1_714_564_800, "seconds", 1_714_564_800_000_000),
    (1_714_564_800_123, "milliseconds", 1_714_564_800_123_000),
])
def test_an_int_that_looks_like_seconds_or_ms_warns(value: int, unit: str, means: int) -> None:
    with pytest.warns(TimestampWarning, match=f"looks like {unit}.*pass {means}"):
        assert to_micros(value) == value  # still taken as µs: the warning says what to pass


def test_microseconds_and_small_ints_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v in (0, 1, 99_999_999, US, 100_000_000_000_000, 1_700_000_000.0):
            to_micros(v)


@pytest.mark.parametrize("text, ago", [("now", 0), ("now-5m", 300_000_000), ("NOW - 90s", 90_000_000),
                                       ("now-1h 30m", 5_400_000_000), ("now-2d", 172_800_000_000),
                                       ("now-250ms", 250_000)])
def test_now_and_now_minus_a_duration_as_the_cli_takes_them(text: str, ago: int) -> None:
    before = time.time_ns() // 1000
    got = to_micros(text)
    after = time.time_ns() // 1000
    assert before - ago <= got <= after - ago


@pytest.mark.parametrize("text", ["now-", "now-5", "now+5m", "now-5 parsecs", "nowish"])
def test_a_bad_relative_time_says_what_is_accepted(text: str) -> None:
    with pytest.raises(InvalidInput, match="now-5m"):
        to_micros(text)
