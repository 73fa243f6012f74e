"""Durations, sizes and times as config files and commands write them, parsed in one place for every key.

A duration is Spark's and Delta's interval text ('10 seconds', '500 milliseconds', 'interval 7 days', '1 week',
'90s', '2.5 h'); a size is '128mb', '256 KB', '1g' or a number of bytes; a time is ISO 8601 or epoch milliseconds
(`parse_time`, for every command that takes one). Pure functions, no I/O.
"""

from __future__ import annotations

import datetime as dt
import re

_DURATION = re.compile(r"(?:interval\s+)?(\d+(?:\.\d+)?)\s*"
                       r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?|w|weeks?)",
                       re.IGNORECASE)
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)i?b?", re.IGNORECASE)


def duration_seconds(text: str) -> float | None:
    """Seconds of a duration such as '10 seconds', '500 milliseconds', 'interval 7 days' or '1 week'; None when the
    text is not one."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        return None
    unit = found[2].lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        scale = 0.001
    elif unit.startswith("m"):
        scale = 60.0
    elif unit.startswith("h"):
        scale = 3600.0
    elif unit.startswith("d"):
        scale = 86400.0
    elif unit.startswith("w"):
        scale = 604800.0
    else:
        scale = 1.0
    return float(found[1]) * scale


def spark_interval(text: str) -> str:
    """A duration in the form Spark's trigger takes whatever the config's spelling ('90s' -> '90000
    milliseconds'); the text itself when it is not a duration (Spark then names it)."""
    seconds = duration_seconds(text)
    return text if seconds is None else f"{round(seconds * 1000)} milliseconds"


def size_bytes(text: str) -> int | None:
    """Bytes of a size such as '128mb', '256 KB', '1g' or '1048576'; None when the text is not one."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        return None
    return int(found[1]) * 1024 ** " kmgt".index(found[2].lower() or " ")


TIME_FORMS = ("an ISO-8601 time (2026-12-08, 2026-12-08T10:00:00, 2026-12-08T10:00:00+01:00; UTC unless it names a "
              "zone) or epoch milliseconds (1796724000000)")


def parse_time(text: str) -> dt.datetime:
    """The time `text` names, in UTC: ISO 8601 with or without a zone (none: UTC), or epoch milliseconds (13
    digits or more, from 2001: fewer digits, `20261208`, would be read as a date by ISO's basic form and as 1970 as
    milliseconds, so neither). ValueError naming the value and `TIME_FORMS` otherwise."""
    text = text.strip()
    try:
        if text.isdigit():  # epoch milliseconds have 13 digits from 2001 on; `20261208` is no time of Kafka's
            if int(text) < 10**12:
                raise ValueError(text)
            return dt.datetime.fromtimestamp(int(text) / 1000, dt.UTC)
        when = dt.datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"cannot read {text!r} as a time: use {TIME_FORMS}") from None
    return when.astimezone(dt.UTC) if when.tzinfo else when.replace(tzinfo=dt.UTC)


def version_or_time(text: str) -> int | dt.datetime:
    """A table version (a number below 10**12: no table has that many versions) or a time (`parse_time`; a number
    of 13 digits or more is epoch milliseconds, from 2001 on). ValueError naming the value and the forms."""
    if text.strip().isdigit() and int(text) < 10**12:
        return int(text)
    try:
        return parse_time(text)
    except ValueError:
        raise ValueError(f"cannot read {text.strip()!r} as a table version or a time: use a version number or "
                         f"{TIME_FORMS}") from None
