"""Every accepted timestamp form converts to the exact microsecond, every bad one is refused."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from tsblob import InvalidInput, from_micros, to_micros

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
