"""The strict Protobuf body check: why a body is not a valid encoding of a message, with the field path.

The `protobuf` package's parser (upb) says only that a body fails ("Error parsing message"). This walk over the
wire format names the field and the fault, so a quarantined record says what is wrong: a varint cut short or
longer than 10 bytes, a length beyond the body, wire types 6 and 7, an end-group tag without its start or a group
never closed, a packed run that does not divide into its elements, a `string` field that is not UTF-8, a nesting
deeper than Protobuf's limit of 100. It accepts what Protobuf accepts (a field of an unexpected wire type is an
unknown field, as is any unknown number), which the differential test holds it to against upb.

The decoder parses with upb first and walks a body only when upb refuses it, or when the schema has proto2
`string` fields (upb does not check their UTF-8; this project refuses them everywhere). A `value.strict` pipeline
walks every body upb accepts once more with `unknown_field`, which names the first unknown field (a number the
message does not define, or a known number of another wire type than its type's), at any depth.
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


class UnknownFieldError(ValueError):
    """`value.strict`: the body holds a field its message does not define, or a known field of another wire type
    (both unknown fields to Protobuf, which drops them); the message: `path: fault`."""


class _Fault(Exception):
    def __init__(self, path: str, fault: str) -> None:
        super().__init__(f"{path or 'body'}: {fault}")


class _Unknown(_Fault):
    """An unknown field, a fault only in a strict walk."""


WIRE_TYPES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "start-group", 5: "fixed32"}


def fault(data: bytes, message: Any) -> str | None:
    """Why `data` is not a valid body of `message` (`path: fault`), or None when it is."""
    try:
        _message(data, 0, len(data), message, "", 0, None)
    except _Fault as exc:
        return str(exc)
    return None


def unknown_field(data: bytes, message: Any) -> str | None:
    """The first unknown field of a body Protobuf accepts (`path: fault`, the path `#<number>` for a number the
    message does not define), or None when it has none (or is not valid at all: `fault` names that)."""
    try:
        _message(data, 0, len(data), message, "", 0, None, strict=True)
    except _Unknown as exc:
        return str(exc)
    except _Fault:
        return None
    return None


def _unknown(field: Any, message: Any, number: int, wire_type: int, where: str) -> _Unknown:
    if field is None:
        return _Unknown(where, f"field number {number} ({WIRE_TYPES.get(wire_type, wire_type)}) is not a field of "
                               f"{message.full_name if message is not None else 'the group'}")
    expected = _expected_wire_type(field)
    return _Unknown(where, f"wire type {wire_type} ({WIRE_TYPES.get(wire_type, wire_type)}) where its type "
                           f"{pt.type_name(field)} takes wire type {expected} ({WIRE_TYPES[expected]})")


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
             group: int | None, strict: bool = False) -> int:
    """Walk one message's fields from `pos` to `end` (or to the end-group tag of field `group`); the end.
    `strict`: an unknown field is an `_Unknown` fault."""
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
        if not known and strict:
            raise _unknown(field, message, number, wire_type, where)
        if not known:
            pos = _skip(data, pos, end, wire_type, number, where, depth)
            continue
        count = seen.get(number, 0)
        seen[number] = count + 1
        if _repeated(field) and not pt._is_map(field) and not (wire_type == 2 and _packable(field)):
            where = f"{where}[{count}]"
        pos = _field(data, pos, end, field, wire_type, where, depth, strict)
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


def _field(data: bytes, pos: int, end: int, field: Any, wire_type: int, where: str, depth: int,
           strict: bool = False) -> int:
    if wire_type == 0:
        return _varint(data, pos, end, where, "value")[1]
    if wire_type == 1 or wire_type == 5:
        size = 8 if wire_type == 1 else 4
        if end - pos < size:
            raise _Fault(where, f"fixed {size}-byte value is cut short")
        return pos + size
    if wire_type == 3:
        return _message(data, pos, end, field.message_type, where, depth + 1, field.number, strict)
    length, pos = _length(data, pos, end, where)
    stop = pos + length
    if field.type in (pt.MESSAGE, pt.GROUP):
        _message(data, pos, stop, field.message_type, where, depth + 1, None, strict)
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
