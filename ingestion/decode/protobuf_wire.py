"""Confluent's Protobuf framing: magic byte 0, a 4-byte big-endian schema id, the message-index array, the body.

The message-index array names the message of the schema's file the body holds: a zig-zag varint count, then that
many zig-zag varint indexes (the first into the file's top-level messages, each next one into the previous one's
nested messages). A single 0 byte stands for [0], the file's first message.
"""

from __future__ import annotations

from ingestion.decode.wire import WireFormatError, split

MAX_INDEXES = 100  # deeper nesting than any schema has: a count beyond it is a damaged header


def _zigzag(value: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    for length in range(10):
        if pos + length >= len(value):
            raise WireFormatError("the message-index array is cut short")
        byte = value[pos + length]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + length + 1
        shift += 7
    raise WireFormatError("a message-index varint is longer than 10 bytes")


def split_indexes(value: bytes) -> tuple[int, tuple[int, ...], memoryview]:
    """(schema id, message indexes, body) of a Confluent Protobuf value; WireFormatError when the header or the
    index array is not valid."""
    schema_id, rest = split(value)
    return (schema_id, *read_indexes(rest))


def read_indexes(rest: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """(message indexes, body) of what follows the 5-byte header."""
    if rest[:1] == b"\x00":  # [0], the file's first message: most records
        return (0,), rest[1:]
    count, pos = _zigzag(rest, 0)
    if not 0 < count <= MAX_INDEXES:
        raise WireFormatError(f"message-index count {count} is outside [0, {MAX_INDEXES}]")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(rest, pos)
        if index < 0:
            raise WireFormatError(f"message index {index} is negative")
        indexes.append(index)
    return tuple(indexes), rest[pos:]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def index_bytes(indexes: tuple[int, ...] | list[int]) -> bytes:
    """The message-index array as Confluent's serializers write it."""
    if list(indexes) == [0]:
        return b"\x00"
    return b"".join(_varint((n << 1) ^ (n >> 63)) for n in (len(indexes), *indexes))
