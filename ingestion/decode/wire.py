"""The Confluent wire format: a magic byte 0, a 4-byte big-endian schema id, then the Avro body."""

from __future__ import annotations

import struct

MAGIC = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")


class WireFormatError(ValueError):
    """The value does not start with a Confluent wire-format header."""


def encode(schema_id: int, body: bytes) -> bytes:
    """Frame an Avro body in the Confluent wire format."""
    return _HEADER.pack(MAGIC, schema_id) + body


def split(value: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro body) of a wire-format value; WireFormatError when it has no valid header."""
    return schema_id(value), memoryview(value)[HEADER_SIZE:]


def schema_id(value: bytes) -> int:
    """The schema id of a wire-format value (its body starts at HEADER_SIZE); WireFormatError when it has no valid
    header."""
    if len(value) < HEADER_SIZE:
        raise WireFormatError(f"value of {len(value)} bytes is shorter than the 5-byte header")
    magic, found = _HEADER.unpack_from(value)
    if magic != MAGIC:
        raise WireFormatError(f"magic byte is {magic}, expected {MAGIC}")
    return int(found)
