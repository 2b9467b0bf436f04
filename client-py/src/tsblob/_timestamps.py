"""Timestamps: everything a user may pass, turned into the server's microseconds.

The server counts microseconds since the Unix epoch as a ``u64``. Users think in
``time.time()`` seconds, ``datetime`` objects and ISO strings, so every method that takes a
timestamp accepts:

- ``int``: microseconds, as the server sees them;
- ``float``: seconds (``time.time()``), rounded to the nearest microsecond;
- ``datetime.datetime``: aware datetimes are exact; **naive ones are taken as UTC** (not
  local time: an edge device's clock zone should not change which record is read);
- ``datetime.date``: midnight UTC of that day;
- ``str``: ISO 8601 (``2024-05-01T12:00:00.123456Z``, ``+02:00`` offsets, or naive = UTC),
  or ``"now"`` / ``"now-<duration>"`` as the CLI takes them (``"now-5m"``, ``"now-1h 30m"``,
  ``"now-2d"``);
- ``datetime.timedelta``: relative to now (``timedelta(hours=-1)``: an hour ago);
- numpy values (numpy is not needed otherwise): integers (``np.int64``) as ``int``, floats
  as ``float``, ``np.datetime64`` of any unit (converted exactly to µs).

An ``int`` that looks like seconds or milliseconds since the epoch (between 1973 and 5138 in
those units, i.e. within three years of 1970 as µs) draws a :class:`TimestampWarning`: the
store counts microseconds, and ``int(time.time())`` would land in January 1970.

Conversion of datetimes is done in integer arithmetic: no float rounding ever moves a
timestamp by a microsecond.
"""

from __future__ import annotations

import math
import operator
import re
import time
import warnings
from datetime import date, datetime, timedelta, timezone
from typing import Any, Union

from ._errors import InvalidInput

__all__ = ["Timestamp", "TimestampWarning", "to_micros", "from_micros", "MAX_TS"]

Timestamp = Union[int, float, datetime, date, str, timedelta, Any]
"""Anything accepted where a timestamp is expected (``Any``: numpy scalars)."""


class TimestampWarning(UserWarning):
    """An integer timestamp that looks like seconds or milliseconds, not microseconds."""


# Values that are seconds (resp. ms) since the epoch of the years 1973..5138 when read in
# those units: as µs they fall in 1970-1973, which no real record has.
_SECONDS_LIKE = (100_000_000, 100_000_000_000)
_MILLIS_LIKE = (100_000_000_000, 100_000_000_000_000)

MAX_TS = 0xFFFF_FFFF_FFFF_FFFE
"""The largest timestamp a record may have (all ones is reserved in batch frames)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)
# fromisoformat before Python 3.11 accepts neither "Z" nor fractions other than 3 or 6
# digits; normalise both so that 3.9 reads what 3.11 reads.
_FRACTION = re.compile(r"(\.\d+)")


def _bad(value: object, why: str) -> InvalidInput:
    return InvalidInput(f"timestamp {value!r} {why}", code="invalid_timestamp")


def _datetime_micros(dt: datetime) -> int:
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // _ONE_US


def _parse_iso(text: str) -> datetime:
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    m = _FRACTION.search(s)
    if m:
        frac = m.group(1)[1:]
        fixed = (frac + "000000")[:6]
        s = s[: m.start(1)] + "." + fixed + s[m.end(1):]
    return datetime.fromisoformat(s)


_DURATION_PART = re.compile(r"\s*(\d+)\s*([^\d\s]+)")
# The units of the server's duration parser (humantime), in µs; months and years as it counts them.
_DURATION_UNITS = {
    **dict.fromkeys(("usec", "us", "µs"), 1),
    **dict.fromkeys(("msec", "ms"), 1_000),
    **dict.fromkeys(("seconds", "second", "sec", "s"), 1_000_000),
    **dict.fromkeys(("minutes", "minute", "min", "m"), 60_000_000),
    **dict.fromkeys(("hours", "hour", "hr", "h"), 3_600_000_000),
    **dict.fromkeys(("days", "day", "d"), 86_400_000_000),
    **dict.fromkeys(("weeks", "week", "w"), 7 * 86_400_000_000),
    **dict.fromkeys(("months", "month", "M"), 2_630_016_000_000),
    **dict.fromkeys(("years", "year", "y"), 31_557_600_000_000),
}


def duration_micros(text: str) -> int:
    """Microseconds of a duration written as the server and the CLI read it (humantime):
    one or more ``<number><unit>`` (``"30d"``, ``"90s"``, ``"1h 30m"``; units ``us``,
    ``ms``, ``s``, ``m``/``min``, ``h``, ``d``, ``w``, ``M`` (months), ``y``). Raises
    ``ValueError``."""
    pos, us, text = 0, 0, text.strip()
    if not text:
        raise ValueError("empty duration")
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        unit = m and (_DURATION_UNITS.get(m.group(2)) or _DURATION_UNITS.get(m.group(2).lower()))
        if m is None or not unit:
            raise ValueError(f"{text!r} is not a duration")
        us += int(m.group(1)) * unit
        pos = m.end()
    return us


def _relative(text: str) -> int:
    """``now`` or ``now-<duration>`` (as the CLI takes them: ``now-5m``, ``now-1h 30m``)."""
    now = time.time_ns() // 1000
    rest = text.strip()[3:].strip()
    if not rest:
        return now
    if not rest.startswith("-"):
        raise ValueError(f"{text!r}")
    return now - duration_micros(rest[1:])


def to_micros(value: Timestamp) -> int:
    """Converts a user timestamp into microseconds since the epoch.

    Raises :class:`~tsblob.InvalidInput` (code ``invalid_timestamp``) for a value that is
    negative, out of range, not a number, or a string that is not ISO 8601.
    """
    if isinstance(value, bool):
        raise _bad(value, "is a bool: give microseconds (int), seconds (float), a datetime or an ISO string")
    if type(value) is int:  # the common case first
        us = value
        if _SECONDS_LIKE[0] <= us < _MILLIS_LIKE[1]:
            _warn_units(us)
    elif isinstance(value, timedelta):
        us = time.time_ns() // 1000 + value // _ONE_US
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(value, "is not a finite number of seconds")
        us = round(value * 1_000_000)
    elif isinstance(value, datetime):
        us = _datetime_micros(value)
    elif isinstance(value, date):
        us = _datetime_micros(datetime(value.year, value.month, value.day))
    elif isinstance(value, str):
        try:
            if value.strip()[:3].lower() == "now":
                us = _relative(value)
            else:
                us = _datetime_micros(_parse_iso(value))
        except ValueError:
            raise _bad(value, "is not a time: give an ISO 8601 date-time such as 2024-05-01T12:00:00.5Z, "
                              "'now' or 'now-<duration>' such as 'now-5m', 'now-1h 30m'") from None
    elif type(value).__name__ == "datetime64":  # numpy, not imported: its own conversion
        if value != value:  # NaT
            raise _bad(value, "is NaT (not a time)")
        np_value: Any = value
        us = int(np_value.astype("datetime64[us]").astype("int64"))
    elif isinstance(value, int) or hasattr(value, "__index__"):  # int subclasses, numpy integers
        return to_micros(operator.index(value))
    elif hasattr(value, "__float__") and type(value).__module__ == "numpy":  # numpy floats
        return to_micros(float(value))
    else:
        raise _bad(value, f"has type {type(value).__name__}: give an int (µs), a float (s), a datetime, "
                          "an ISO string or a timedelta from now")
    if us < 0:
        raise _bad(value, "is before 1970-01-01T00:00:00Z: the store keeps non-negative µs since the epoch")
    if us > MAX_TS:
        raise _bad(value, f"is above the largest timestamp {MAX_TS} µs")
    return us


def _warn_units(us: int) -> None:
    unit, factor = ("seconds", 1_000_000) if us < _SECONDS_LIKE[1] else ("milliseconds", 1_000)
    warnings.warn(f"timestamp {us} looks like {unit} since the epoch, but integers are microseconds: "
                  f"it means {from_micros(us).isoformat()}; for {from_micros(us * factor).isoformat()} "
                  f"pass {us * factor} (or a float of seconds, or a datetime)", TimestampWarning, stacklevel=4)


def from_micros(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC ``datetime`` (exact, no float)."""
    return _EPOCH + timedelta(microseconds=us)
