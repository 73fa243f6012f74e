"""JSON values: strict parsing, the faults a document can have (the decoders' error classes), and the
`format` readers (docs/json.md#strict-decoding-what-is-invalid).

Every fault's message starts with the JSON path of the value (`$.items[1].sku`), then says what is wrong.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from ingestion.errors import one_line

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class InvalidJsonError(ValueError):
    """A document the schema rejects; the message starts with the JSON path of the fault."""


class MalformedJsonError(InvalidJsonError):
    """Not JSON text: a syntax error, bytes that are not UTF-8, NaN or Infinity literals."""


class DuplicateKeyError(MalformedJsonError):
    """An object has the same key twice (JSON allows it; which one counts is undefined, so neither does)."""


class JsonTypeError(InvalidJsonError):
    """A value of another type than the schema's (null for a property that is not nullable among them)."""


class MissingPropertyError(InvalidJsonError):
    """A required property is absent."""


class JsonEnumError(InvalidJsonError):
    """A value outside the schema's `enum` (or `const`)."""


class JsonRangeError(InvalidJsonError):
    """A number beyond its column (an integer outside 64 bits, a number beyond a double) or its bounds."""


class JsonFormatError(InvalidJsonError):
    """A string that is not its `format` (date-time, date, time, uuid)."""


class JsonConstraintError(InvalidJsonError):
    """A value against another keyword: lengths, `pattern`, item counts, `additionalProperties: false`."""


# RFC 3339 as rfc3339-validator (the jsonschema package's date-time check) reads it: no leap second, `T` and `Z`
# in either case.
_DATE_TIME = re.compile(r"(\d{4})-(0[1-9]|1[0-2])-(\d{2})[Tt]([01]\d|2[0-3]):([0-5]\d):([0-5]\d)(\.\d+)?"
                        r"([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def show(value: Any) -> str:
    """A value for a message: its JSON, cut to 60 characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def wrong_type(path: str, expected: str, value: Any) -> JsonTypeError:
    got = "null" if value is None else f"{_type_name(value)} {show(value)}"
    return JsonTypeError(f"{path}: expected {expected}, got {got}")


def parse(text: bytes | bytearray | memoryview | str, **options: Any) -> Any:
    """The parsed JSON of a body: MalformedJsonError for anything that is not strict JSON (invalid UTF-8, NaN and
    Infinity literals, syntax), DuplicateKeyError for an object with a key twice."""
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedJsonError(f"$: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        parsed = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant, **options)
    except json.JSONDecodeError as exc:
        raise MalformedJsonError(f"$: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # Python's limit on the digits of an integer, nesting depth
        if isinstance(exc, InvalidJsonError):
            raise
        raise MalformedJsonError(f"$: not JSON this decoder reads: {one_line(exc)[:120]}") from None
    if _SURROGATE_ESCAPE.search(text):  # a \uD800-\uDFFF escape not paired: json keeps it, no column can
        _unicode(parsed, "$")
    return parsed


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _unicode(value: Any, path: str) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MalformedJsonError(f"{path}: a lone surrogate \\u{ord(value[exc.start]):04x} is not Unicode text"
                                     ) from None
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _unicode(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _unicode(key, f"{path} (a key)")
            _unicode(item, member(path, key))


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise DuplicateKeyError(f"$: key {twice!r} appears twice in one object")
    return result


def _no_constant(name: str) -> Any:
    raise MalformedJsonError(f"$: {name} is not a JSON value")


def member(path: str, name: str) -> str:
    return f"{path}.{name}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"{path}[{json.dumps(name)}]"


def read_date_time(text: str) -> dt.datetime:
    """An RFC 3339 date-time -> a UTC datetime (digits below the microsecond dropped); ValueError otherwise."""
    m = _DATE_TIME.fullmatch(text)
    if m is None:
        raise ValueError("RFC 3339 date-time expected, like 2026-01-31T12:00:00Z")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micros = int((m.group(7) or ".0")[1:7].ljust(6, "0"))
    zone = m.group(8)
    offset = dt.timedelta(0) if zone in "Zz" else (1 if zone[0] == "+" else -1) * dt.timedelta(
        hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        local = dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=dt.timezone(offset))
        return local.astimezone(dt.UTC)
    except (ValueError, OverflowError) as exc:
        raise ValueError(str(exc)) from None


def read_date(text: str) -> dt.date:
    if not _DATE.fullmatch(text):
        raise ValueError("a full-date expected, like 2026-01-31")
    return dt.date.fromisoformat(text)


def read_time(text: str) -> str:
    read_date_time("1970-01-01T" + text)
    return text


def read_uuid(text: str) -> str:
    if not _UUID.fullmatch(text):
        raise ValueError("8-4-4-4-12 hexadecimal digits expected")
    return text


FORMAT_READERS: dict[str, Callable[[str], Any]] = {"date-time": read_date_time, "date": read_date,
                                                    "time": read_time, "uuid": read_uuid}
