"""A strict reading of Avro bodies: every rule of the Avro specification that fastavro does not enforce.

fastavro decodes what it can: a negative enum or union index picks a symbol or branch from the end of the list, a
boolean byte of 2 reads as true, a negative length reads as an empty value, a decimal wider than its precision
reads as a larger number. Such bodies are not Avro; landing them would put a plausible but wrong value in
bronze. `body_validator(schema)` compiles a writer schema into a function that walks a body once and raises
`MalformedAvroError` naming the field path and the fault (`status: enum index -1 outside [0, 4)`) or
`UnrepresentableValueError` for a valid value that Spark's column type cannot hold (a date in year 10000). It
returns where the body's record ends, so the caller also sees trailing bytes.

Rules (Avro 1.12 specification, "Binary encoding", and its logical types):
- `int` and `long` are zig-zag varints of at most 5 and 10 bytes whose value fits 32 and 64 bits;
- a `boolean` is one byte, 0 or 1;
- `float` and `double` take 4 and 8 bytes; `fixed` takes exactly its size;
- `bytes` and `string` lengths are not negative and not beyond the bytes left (nor the limits in `limits.py`);
  strings, map keys included, are valid UTF-8;
- enum symbols and union branches are indexes within their lists;
- arrays and maps are blocks: a count (negative: followed by the block's byte size), items, and a 0 count at the
  end; a count beyond the items the bytes left can hold, or beyond the limits, is refused before any item is
  read;
- a `decimal`'s unscaled value fits its precision (|unscaled| < 10^precision), and bytes decimals have at least
  one byte; a `uuid` string is in the 8-4-4-4-12 hexadecimal form of RFC 4122.
Representable ranges (Spark's types, as the JVM path checks them too): dates, timestamps in years 1 to 9999, times
within a day.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from ingestion import limits
from ingestion.decode import validate_fast

Reader = Callable[[bytes, int, str], int]  # (body, position, field path) -> position after the value


class MalformedAvroError(ValueError):
    """The body breaks the Avro specification; the message names the field path and the fault."""


class UnrepresentableValueError(ValueError):
    """A valid Avro value that the table's Spark type cannot hold (a date in year 10000, say)."""


_MIN_DAY, _MAX_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31, in days from the Unix epoch
_MIN_MILLIS, _MAX_MILLIS = _MIN_DAY * 86_400_000, (_MAX_DAY + 1) * 86_400_000 - 1
RANGES: dict[str, tuple[int, int, str]] = {
    "date": (_MIN_DAY, _MAX_DAY, "days"),
    "time-millis": (0, 86_400_000 - 1, "ms"),
    "time-micros": (0, 86_400_000_000 - 1, "µs"),
    "timestamp-millis": (_MIN_MILLIS, _MAX_MILLIS, "ms"),
    "local-timestamp-millis": (_MIN_MILLIS, _MAX_MILLIS, "ms"),
    "timestamp-micros": (_MIN_MILLIS * 1000, _MAX_MILLIS * 1000 + 999, "µs"),
    "local-timestamp-micros": (_MIN_MILLIS * 1000, _MAX_MILLIS * 1000 + 999, "µs"),
}
UUID_FORM = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_Made = TypeVar("_Made")  # what `_per_schema` makes of a schema


def _where(path: str) -> str:
    return path or "record"


def _varint(buf: bytes, pos: int, path: str, what: str, most: int) -> tuple[int, int]:
    """A zig-zag varint of at most `most` bytes: (value, position after it)."""
    result = shift = 0
    end = len(buf)
    for _ in range(most):
        if pos >= end:
            raise MalformedAvroError(f"{_where(path)}: {what} cut short: the body ends at byte {end}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            value = (result >> 1) ^ -(result & 1)
            bits = 32 if most == 5 else 64
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise MalformedAvroError(f"{_where(path)}: {what} varint overflows {bits} bits")
            return value, pos
        shift += 7
    raise MalformedAvroError(f"{_where(path)}: {what} varint is longer than {most} bytes")


def _int(buf: bytes, pos: int, path: str, what: str = "int") -> tuple[int, int]:
    return _varint(buf, pos, path, what, 5)


def _long(buf: bytes, pos: int, path: str, what: str = "long") -> tuple[int, int]:
    return _varint(buf, pos, path, what, 10)


def _length(buf: bytes, pos: int, path: str, what: str, limit: int) -> tuple[int, int]:
    """A length prefix: (length, position of the first byte it counts)."""
    n, pos = _long(buf, pos, path, f"{what} length")
    if n < 0:
        raise MalformedAvroError(f"{_where(path)}: {what} length {n} is negative")
    left = len(buf) - pos
    if n > left:
        raise MalformedAvroError(f"{_where(path)}: {what} length {n} is beyond the {left} bytes left")
    if n > limit:
        raise MalformedAvroError(f"{_where(path)}: {what} length {n} exceeds the limit of {limit} bytes")
    return n, pos


def _utf8(buf: bytes, start: int, end: int, path: str, what: str) -> None:
    try:
        buf[start:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = buf[start + exc.start]
        raise MalformedAvroError(f"{_where(path)}: {what} is not valid UTF-8 (byte 0x{bad:02x} at {exc.start}: "
                                 f"{exc.reason})") from None


def _per_schema(make: Callable[[Any], _Made]) -> Callable[[Any], _Made]:
    """`make(schema)` made once per schema (parsed JSON, keyed by its text) in a process: the generated code of a
    schema takes a millisecond or two to compile, for each of a hundred pipelines of one schema in a `run --all`;
    what it makes keeps no state between calls, so it is shared."""
    cached = functools.lru_cache(maxsize=256)(lambda text: make(json.loads(text)))

    @functools.wraps(make)
    def made(schema: Any) -> _Made:
        return cached(json.dumps(schema, sort_keys=True))

    return made


@_per_schema
def body_validator(schema: Any) -> Callable[[bytes], int]:
    """A function that checks a body written with `schema` (parsed JSON) and returns where its value ends."""
    compiler = _Compiler()
    read = compiler.compile(schema, None)

    def precise(body: bytes) -> int:
        return read(body, 0, "")

    fast = validate_fast.generated(schema, compiler.compile, compiler.definitions, set(compiler.named),
                                  lambda items: min_size(items, compiler.definitions))
    if fast is None:
        return precise

    def validate(body: bytes) -> int:
        try:
            return fast(body)
        except Exception:  # noqa: BLE001 - not sure: the precise walk names the field and the fault, or accepts
            return precise(body)

    return validate


@_per_schema
def body_reader(schema: Any) -> Callable[[bytes, int], tuple[Any, ...]] | None:
    """The checked one-pass read of a record written with `schema` (parsed JSON), reading it as `schema` itself
    (`validate_fast.reader`): (buffer, where the body starts) -> its fields' values, raising on any fault; None
    for a schema it does not read."""
    compiler = _Compiler()
    compiler.compile(schema, None)
    return validate_fast.reader(schema, compiler.compile, compiler.definitions, set(compiler.named),
                                lambda items: min_size(items, compiler.definitions))


def min_size(schema: Any, named: dict[str, Any] | None = None, seen: frozenset[str] = frozenset()) -> int:
    """The fewest bytes a value of `schema` takes (recursive references count as 0)."""
    named = {} if named is None else named
    if isinstance(schema, list):
        return 1 + min((min_size(b, named, seen) for b in schema), default=0)
    if isinstance(schema, str):
        if schema in ("null",):
            return 0
        if schema in ("boolean", "int", "long", "bytes", "string"):
            return 1
        if schema == "float":
            return 4
        if schema == "double":
            return 8
        if schema in seen or schema not in named:
            return 0
        return min_size(named[schema], named, seen | {schema})
    kind = schema.get("type")
    if kind in ("record", "error"):
        return sum(min_size(f["type"], named, seen) for f in schema.get("fields", []))
    if kind == "fixed":
        return int(schema.get("size", 0))
    if kind in ("enum", "array", "map"):
        return 1
    return min_size(kind, named, seen)


class _Compiler:
    """Compiles a schema into nested readers; named types are compiled once and may refer to themselves."""

    def __init__(self) -> None:
        self.named: dict[str, Reader] = {}
        self.definitions: dict[str, Any] = {}  # full name -> schema, for min_size

    def compile(self, schema: Any, namespace: str | None) -> Reader:
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self._primitive(schema, None, {})
            return self._reference(schema, namespace)
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if kind in ("record", "error"):
            return self._record(schema, namespace)
        if kind == "enum":
            return self._enum(schema, namespace)
        if kind == "fixed":
            return self._fixed(schema, namespace)
        if kind == "array":
            return self._blocks(schema["items"], namespace, keyed=False)
        if kind == "map":
            return self._blocks(schema["values"], namespace, keyed=True)
        if kind in _PRIMITIVES:
            return self._primitive(kind, logical, schema)
        return self.compile(kind, namespace)

    # named types ---------------------------------------------------------------------------------------------

    def _full_name(self, schema: dict[str, Any], namespace: str | None) -> tuple[str, str | None]:
        name = str(schema["name"])
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        space = schema.get("namespace", namespace)
        return (f"{space}.{name}" if space else name), space

    def _define(self, schema: dict[str, Any], namespace: str | None, reader: Reader) -> str | None:
        full, space = self._full_name(schema, namespace)
        self.named[full] = reader
        self.definitions[full] = schema
        short = str(schema["name"]).rsplit(".", 1)[-1]
        self.definitions.setdefault(short, schema)
        return space

    def _reference(self, name: str, namespace: str | None) -> Reader:
        candidates = [f"{namespace}.{name}", name] if namespace and "." not in name else [name]

        def read(buf: bytes, pos: int, path: str) -> int:  # looked up when read: the type may be defined later
            for candidate in candidates:
                found = self.named.get(candidate)
                if found is not None:
                    return found(buf, pos, path)
            raise MalformedAvroError(f"{_where(path)}: unknown named type {name!r}")

        return read

    def _record(self, schema: dict[str, Any], namespace: str | None) -> Reader:
        fields: list[tuple[str, Reader]] = []

        def read(buf: bytes, pos: int, path: str) -> int:
            prefix = f"{path}." if path else ""
            for name, field in fields:
                pos = field(buf, pos, prefix + name)
            return pos

        space = self._define(schema, namespace, read)  # before its fields: a record may contain itself
        fields.extend((f["name"], self.compile(f["type"], space)) for f in schema.get("fields", []))
        return read

    def _enum(self, schema: dict[str, Any], namespace: str | None) -> Reader:
        count = len(schema.get("symbols", []))

        def read(buf: bytes, pos: int, path: str) -> int:
            index, pos = _int(buf, pos, path, "enum index")
            if not 0 <= index < count:
                raise MalformedAvroError(f"{_where(path)}: enum index {index} outside [0, {count})")
            return pos

        self._define(schema, namespace, read)
        return read

    def _fixed(self, schema: dict[str, Any], namespace: str | None) -> Reader:
        size = int(schema["size"])
        decimal = schema.get("logicalType") == "decimal"
        limit = 10 ** int(schema.get("precision", 0)) if decimal else 0

        def read(buf: bytes, pos: int, path: str) -> int:
            end = pos + size
            if end > len(buf):
                raise MalformedAvroError(f"{_where(path)}: fixed of {size} bytes is beyond the "
                                         f"{len(buf) - pos} bytes left")
            if decimal and size:
                _decimal_fits(buf[pos:end], limit, schema, path)
            return end

        self._define(schema, namespace, read)
        return read

    # the rest ------------------------------------------------------------------------------------------------

    def _union(self, branches: list[Any], namespace: str | None) -> Reader:
        readers = [self.compile(b, namespace) for b in branches]
        count = len(readers)

        def read(buf: bytes, pos: int, path: str) -> int:
            index, pos = _int(buf, pos, path, "union index")
            if not 0 <= index < count:
                raise MalformedAvroError(f"{_where(path)}: union index {index} outside [0, {count})")
            return readers[index](buf, pos, path)

        return read

    def _blocks(self, items: Any, namespace: str | None, *, keyed: bool) -> Reader:
        item = self.compile(items, namespace)
        what = "map" if keyed else "array"
        item_bytes: list[int] = []  # computed on first use: named item types may not be defined yet

        def read(buf: bytes, pos: int, path: str) -> int:
            if not item_bytes:
                item_bytes.append(max(1, (1 if keyed else 0) + min_size(items, self.definitions)))
            smallest = item_bytes[0]
            total = 0
            while True:
                count, pos = _long(buf, pos, path, f"{what} block count")
                if count == 0:
                    return pos
                if count < 0:
                    # The block's byte size lets a reader skip it; a reader reads the items, as Avro's Java
                    # reader does, and so does this one (the size must still be a valid long).
                    count = -count
                    _, pos = _long(buf, pos, path, f"{what} block size")
                left = len(buf) - pos
                if count * smallest > left:
                    raise MalformedAvroError(f"{_where(path)}: {what} block count {count} is beyond the {left} "
                                             f"bytes left (an item takes at least {smallest})")
                total += count
                if total > limits.MAX_COLLECTION_ITEMS:
                    raise MalformedAvroError(f"{_where(path)}: {what} of {total} items exceeds the limit of "
                                             f"{limits.MAX_COLLECTION_ITEMS}")
                for i in range(count):
                    if keyed:
                        n, start = _length(buf, pos, f"{path}[{i}]", "map key", limits.MAX_STRING_BYTES)
                        pos = start + n
                        _utf8(buf, start, pos, path, "map key")
                        pos = item(buf, pos, f"{path}[{buf[start:pos].decode()!r}]")
                    else:
                        pos = item(buf, pos, f"{path}[{i}]")

        return read

    def _primitive(self, kind: str, logical: str | None, schema: dict[str, Any]) -> Reader:
        if kind == "null":
            return lambda buf, pos, path: pos
        if kind == "boolean":
            return _boolean
        if kind in ("int", "long"):
            most = 5 if kind == "int" else 10
            bounds = RANGES.get(str(logical)) if logical else None
            if bounds is None:
                return lambda buf, pos, path: _varint(buf, pos, path, kind, most)[1]
            low, high, unit = bounds

            def ranged(buf: bytes, pos: int, path: str) -> int:
                value, pos = _varint(buf, pos, path, kind, most)
                if not low <= value <= high:
                    raise UnrepresentableValueError(f"{_where(path)}: {logical} {value} {unit} is outside "
                                                    f"[{low}, {high}]")
                return pos

            return ranged
        if kind in ("float", "double"):
            size = 4 if kind == "float" else 8

            def fixed_size(buf: bytes, pos: int, path: str) -> int:
                if pos + size > len(buf):
                    raise MalformedAvroError(f"{_where(path)}: {kind} needs {size} bytes, {len(buf) - pos} left")
                return pos + size

            return fixed_size
        if kind == "bytes":
            decimal = logical == "decimal"
            limit = 10 ** int(schema.get("precision", 0)) if decimal else 0

            def read_bytes(buf: bytes, pos: int, path: str) -> int:
                n, start = _length(buf, pos, path, "bytes", limits.MAX_BYTES_LENGTH)
                if decimal:
                    if n == 0:
                        raise MalformedAvroError(f"{_where(path)}: decimal has no bytes")
                    _decimal_fits(buf[start:start + n], limit, schema, path)
                return start + n

            return read_bytes
        uuid = logical == "uuid"

        def read_string(buf: bytes, pos: int, path: str) -> int:
            n, start = _length(buf, pos, path, "string", limits.MAX_STRING_BYTES)
            end = start + n
            _utf8(buf, start, end, path, "string")
            if uuid and not UUID_FORM.fullmatch(buf[start:end]):
                raise MalformedAvroError(f"{_where(path)}: uuid {buf[start:end].decode()!r} is not in the "
                                         "8-4-4-4-12 hexadecimal form")
            return end

        return read_string


def _boolean(buf: bytes, pos: int, path: str) -> int:
    if pos >= len(buf):
        raise MalformedAvroError(f"{_where(path)}: boolean cut short: the body ends at byte {len(buf)}")
    if buf[pos] > 1:
        raise MalformedAvroError(f"{_where(path)}: boolean byte {buf[pos]} is neither 0 nor 1")
    return pos + 1


def _decimal_fits(raw: bytes, limit: int, schema: dict[str, Any], path: str) -> None:
    unscaled = int.from_bytes(raw, "big", signed=True)
    if abs(unscaled) >= limit:
        raise MalformedAvroError(f"{_where(path)}: decimal unscaled value {unscaled} exceeds precision "
                                 f"{schema.get('precision')}")
