"""The strict Protobuf body check: why a body is not a valid encoding of a message, with the field path.

The `protobuf` package's parser (upb) says only that a body fails ("Error parsing message"). This walk over the
wire format names the field and the fault, so a quarantined record says what is wrong: a varint cut short or
longer than 10 bytes, a length beyond the body, wire types 6 and 7, an end-group tag without its start or a group
never closed, a packed run that does not divide into its elements, a `string` field that is not UTF-8, a nesting
deeper than Protobuf's limit of 100. It accepts what Protobuf accepts (a field of an unexpected wire type is an
unknown field, as is any unknown number), which the differential test holds it to against upb.

The decoder parses with upb first and walks a body only when upb refuses it, or when the schema has proto2
`string` fields (upb does not check their UTF-8; this project refuses them everywhere).
"""

from __future__ import annotations

from typing import Any

from ingestion.schema import protobuf_types as pt

MAX_DEPTH = 100
_MASK64 = (1 << 64) - 1
_VARINT_TYPES = frozenset({pt.INT32, pt.INT64, pt.UINT32, pt.UINT64, pt.SINT32, pt.SINT64, pt.BOOL, pt.ENUM})
_FIXED64_TYPES = frozenset({pt.FIXED64, pt.SFIXED64, pt.DOUBLE})
_FIXED32_TYPES = frozenset({pt.FIXED32, pt.SFIXED32, pt.FLOAT})


class MalformedProtobufError(ValueError):
    """The body is not a valid Protobuf encoding of the message its header names (the message: `path: fault`)."""


class _Fault(Exception):
    def __init__(self, path: str, fault: str) -> None:
        super().__init__(f"{path or 'body'}: {fault}")


def fault(data: bytes, message: Any) -> str | None:
    """Why `data` is not a valid body of `message` (`path: fault`), or None when it is."""
    try:
        _message(data, 0, len(data), message, "", 0, None)
    except _Fault as exc:
        return str(exc)
    return None


def _varint(data: bytes, pos: int, end: int, path: str, what: str) -> tuple[int, int]:
    result = shift = 0
    for i in range(pos, min(pos + 10, end)):
        byte = data[i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, i + 1
        shift += 7
    if end - pos >= 10:
        raise _Fault(path, f"{what} varint is longer than 10 bytes")
    raise _Fault(path, f"{what} varint is cut short by the end of the {'body' if not path else 'field'}")


def _expected_wire_type(field: Any) -> int:
    if field.type in _VARINT_TYPES:
        return 0
    if field.type in _FIXED64_TYPES:
        return 1
    if field.type in _FIXED32_TYPES:
        return 5
    if field.type == pt.GROUP:
        return 3
    return 2


def _message(data: bytes, pos: int, end: int, message: Any, path: str, depth: int,
             group: int | None) -> int:
    """Walk one message's fields from `pos` to `end` (or to the end-group tag of field `group`); the end."""
    if depth > MAX_DEPTH:
        raise _Fault(path, f"nested deeper than Protobuf's limit of {MAX_DEPTH}")
    fields = message.fields_by_number if message is not None else {}
    seen: dict[int, int] = {}
    prefix = f"{path}." if path else ""
    while pos < end:
        tag, pos = _varint(data, pos, end, path, "tag")
        number, wire_type = tag >> 3, tag & 7
        field = fields.get(number)
        where = f"{prefix}{field.name}" if field is not None else f"{prefix}#{number}"
        if tag > 0xFFFFFFFF:
            raise _Fault(path, f"tag {tag} does not fit in 32 bits")
        if number == 0:
            raise _Fault(path, "field number 0 is not a valid field number")
        if wire_type in (6, 7):
            raise _Fault(where, f"wire type {wire_type} is not a Protobuf wire type")
        if wire_type == 4:
            if group == number:
                return pos
            raise _Fault(where, "end-group tag without a matching start-group tag")
        known = field is not None and (wire_type == _expected_wire_type(field) or (
            wire_type == 2 and _packable(field)))
        if not known:
            pos = _skip(data, pos, end, wire_type, number, where, depth)
            continue
        count = seen.get(number, 0)
        seen[number] = count + 1
        if _repeated(field) and not pt._is_map(field) and not (wire_type == 2 and _packable(field)):
            where = f"{where}[{count}]"
        pos = _field(data, pos, end, field, wire_type, where, depth)
    if group is not None:
        raise _Fault(path, f"group of field {group} is not closed before the end")
    return pos


def _repeated(field: Any) -> bool:
    return pt._is_repeated(field)


def _packable(field: Any) -> bool:
    return _repeated(field) and field.type not in (pt.STRING, pt.BYTES, pt.MESSAGE, pt.GROUP)


def _length(data: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    length, pos = _varint(data, pos, end, where, "length")
    if length > end - pos:
        raise _Fault(where, f"length {length} is beyond the {end - pos} bytes left")
    return length, pos


def _field(data: bytes, pos: int, end: int, field: Any, wire_type: int, where: str, depth: int) -> int:
    if wire_type == 0:
        return _varint(data, pos, end, where, "value")[1]
    if wire_type == 1 or wire_type == 5:
        size = 8 if wire_type == 1 else 4
        if end - pos < size:
            raise _Fault(where, f"fixed {size}-byte value is cut short")
        return pos + size
    if wire_type == 3:
        return _message(data, pos, end, field.message_type, where, depth + 1, field.number)
    length, pos = _length(data, pos, end, where)
    stop = pos + length
    if field.type in (pt.MESSAGE, pt.GROUP):
        _message(data, pos, stop, field.message_type, where, depth + 1, None)
    elif field.type == pt.STRING:
        try:
            bytes(data[pos:stop]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Fault(where, f"string is not valid UTF-8 (byte {exc.start})") from None
    elif field.type != pt.BYTES:  # packed numbers
        expected = _expected_wire_type(field)
        if expected == 0:
            at = pos
            while at < stop:
                at = _varint(data, at, stop, where, "packed value")[1]
        elif length % (8 if expected == 1 else 4):
            raise _Fault(where, f"packed run of {length} bytes is not a whole number of "
                                f"{8 if expected == 1 else 4}-byte values")
    return stop


def _skip(data: bytes, pos: int, end: int, wire_type: int, number: int, where: str, depth: int) -> int:
    """Past an unknown field (kept by Protobuf, dropped by this project: docs/protobuf.md)."""
    if wire_type == 0:
        return _varint(data, pos, end, where, "value")[1]
    if wire_type in (1, 5):
        size = 8 if wire_type == 1 else 4
        if end - pos < size:
            raise _Fault(where, f"fixed {size}-byte value is cut short")
        return pos + size
    if wire_type == 2:
        length, pos = _length(data, pos, end, where)
        return pos + length
    return _message(data, pos, end, None, where, depth + 1, number)  # a group: its fields, to its end tag
