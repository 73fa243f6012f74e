"""The strict reading of `validate`, generated as one straight-line Python function per writer schema.

`validate.body_validator` walks a body through nested closures: a function call per field and per varint byte,
two thirds of the driver-side decoder's time (profile of 100,000 twelve-field records). This module writes the same
walk as Python source, once per schema: each field's varint read inline (a one-byte varint, the common case, in
two operations), records and unions inlined, no field path built. It only answers "valid, ending here" or "not
sure": on any fault it raises, and `body_validator` then walks the body again with the precise readers, which name
the field and the fault (or find the body valid). So it can never accept a body the precise walk refuses: it makes
every check the precise walk makes (`validate`'s rules: varint sizes and ranges, boolean bytes, lengths, UTF-8,
enum and union indexes, blocks and their limits, decimals' precision, uuids' form, the ranges of dates and times),
and what it does not inline (recursive references, nesting deeper than `_MAX_DEPTH`) is delegated to the precise
readers themselves.

`reader` generates the same walk with every value kept: one function per schema that checks a body as strictly
and returns its record as a tuple of the top-level fields' values, each in the form the table's Arrow column takes
(timestamps in microseconds, enums as their symbols, decimals as `Decimal`, maps as (key, value) pairs, nested
records as dicts). It replaces the check and fastavro's read of a body written with the reader schema itself, the
common case, in one pass (docs/performance.md#one-pass-avro-reads). What it cannot read as the table wants
(schema resolution, unions of several types, recursive types, Debezium's and Connect's semantic types) it does not
generate: those bodies take the check and fastavro as before.
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable
from typing import Any

from ingestion import limits
from ingestion.schema.avro_types import semantic

# Unions Spark's from_avro widens to one column (avro_types' `_WIDENED`): their value is the branch's own.
_WIDENED = ({"int", "long"}, {"float", "double"})

_SIMPLE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_MAX_DEPTH = 40  # nested unions and records beyond this are delegated (Python's indentation limit is 100)


class _NotSure(Exception):
    """The generated walk found something the precise walk must look at."""


class _NoReader(Exception):
    """A schema whose values the generated reader does not produce (the check and fastavro read it)."""


# The value of a logical int or long, as its Arrow column takes it (timestamps in microseconds).
_SCALED = {"timestamp-millis": " * 1000", "local-timestamp-millis": " * 1000"}


class _Writer:
    def __init__(self, precise: Callable[[Any, str | None], Callable[[bytes, int, str], int]],
                 definitions: dict[str, Any], known: set[str], smallest: Callable[[Any], int]) -> None:
        self.constants: list[Any] = []  # enums' symbols, decimals' contexts: `constants[i]` in the generated code
        self.precise = precise
        self.smallest = smallest
        from ingestion.decode.validate import RANGES  # validate imports this module

        self.ranges = RANGES
        self.definitions = definitions
        self.known = known
        self.lines: list[str] = []
        self.delegated: list[Callable[[bytes, int, str], int]] = []
        self.fresh = 0
        self.last_size = ""  # the variable holding the length of the string `simple` read last

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def var(self) -> str:
        self.fresh += 1
        return f"v{self.fresh}"

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"constants[{len(self.constants) - 1}]"

    def varint(self, depth: int, target: str, most: int) -> None:
        """A zig-zag varint of at most `most` bytes read inline: one byte in two operations, a longer one in a
        loop (past the body's end: IndexError, not sure), its value in the int's or long's range."""
        bits = 32 if most == 5 else 64
        self.emit(depth, "b = buf[pos]")
        self.emit(depth, "pos += 1")
        self.emit(depth, "if b < 128:")
        self.emit(depth + 1, f"{target} = (b >> 1) ^ -(b & 1)")
        self.emit(depth, "else:")
        self.emit(depth + 1, "r = b & 127")
        self.emit(depth + 1, "s = 7")
        self.emit(depth + 1, "while True:")
        self.emit(depth + 2, "b = buf[pos]")
        self.emit(depth + 2, "pos += 1")
        self.emit(depth + 2, "r |= (b & 127) << s")
        self.emit(depth + 2, "if b < 128: break")
        self.emit(depth + 2, "s += 7")
        self.emit(depth + 2, f"if s >= {7 * most}: raise NotSure")
        self.emit(depth + 1, f"{target} = (r >> 1) ^ -(r & 1)")
        self.emit(depth + 1, f"if not {-(1 << (bits - 1))} <= {target} < {1 << (bits - 1)}: raise NotSure")

    def delegate(self, depth: int, schema: Any, namespace: str | None, into: str | None = None) -> None:
        if into is not None:
            raise _NoReader(f"a value the reader does not produce: {schema!r:.80}")
        self.delegated.append(self.precise(schema, namespace))
        self.emit(depth, f"pos = delegated[{len(self.delegated) - 1}](buf, pos, '')")

    def walk(self, depth: int, schema: Any, namespace: str | None, stack: tuple[str, ...],
             into: str | None = None) -> None:
        """The check of a value of `schema`; `into`: the variable its value is kept in (the reader)."""
        if depth > _MAX_DEPTH:
            self.delegate(depth, schema, namespace, into)
            return
        if isinstance(schema, list):
            self.union(depth, schema, namespace, stack, into)
            return
        if isinstance(schema, str):
            if schema in _SIMPLE:
                self.simple(depth, schema, into)
                return
            full = self.resolve(schema, namespace)
            if full is None or full in stack:
                self.delegate(depth, schema, namespace, into)  # the precise reader resolves it, or names the fault
                return
            self.walk(depth, self.definitions[full], full.rsplit(".", 1)[0] if "." in full else None,
                      (*stack, full), into)
            return
        if into is not None and semantic(schema) is not None:
            raise _NoReader(f"a semantic type: {schema.get('name') or schema.get('connect.name')}")
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = str(schema["name"])
            space = name.rsplit(".", 1)[0] if "." in name else schema.get("namespace", namespace)
            full = name if "." in name else (f"{space}.{name}" if space else name)
            fields = schema.get("fields", [])
            values = [self.var() if into is not None else None for _ in fields]
            for field, value in zip(fields, values, strict=True):
                self.walk(depth, field["type"], space, (*stack, full), value)
            if into is not None:
                pairs = ", ".join(f"{str(f['name'])!r}: {v}" for f, v in zip(fields, values, strict=True))
                self.emit(depth, f"{into} = {{{pairs}}}")
            return
        if kind == "enum":
            index = self.var()
            self.varint(depth, index, 5)
            self.emit(depth, f"if not 0 <= {index} < {len(schema.get('symbols', []))}: raise NotSure")
            if into is not None:
                self.emit(depth, f"{into} = {self.constant(tuple(schema.get('symbols', [])))}[{index}]")
            return
        logical = schema.get("logicalType")
        if kind == "fixed":
            size = int(schema["size"])
            self.emit(depth, f"pos += {size}")
            self.emit(depth, "if pos > end: raise NotSure")
            if logical == "decimal" and size:
                self.decimal(depth, f"buf[pos - {size}:pos]", schema, into)
            elif into is not None:
                self.emit(depth, f"{into} = buf[pos - {size}:pos]")
            return
        if kind in ("array", "map"):
            self.blocks(depth, schema, namespace, stack, into)
            return
        if kind in ("int", "long") and logical in self.ranges:
            value = self.var()
            self.varint(depth, value, 5 if kind == "int" else 10)
            low, high, _ = self.ranges[logical]
            self.emit(depth, f"if not {low} <= {value} <= {high}: raise NotSure")
            if into is not None:
                self.emit(depth, f"{into} = {value}{_SCALED.get(logical, '')}")
            return
        if kind == "bytes" and logical == "decimal":
            length = self.var()
            self.varint(depth, length, 10)
            self.emit(depth, f"if {length} < 1 or {length} > {limits.MAX_BYTES_LENGTH} or pos + {length} > end: "
                             "raise NotSure")
            self.emit(depth, f"pos += {length}")
            self.decimal(depth, f"buf[pos - {length}:pos]", schema, into)
            return
        if kind == "string" and logical == "uuid":
            self.simple(depth, "string", into)
            self.emit(depth, f"if uuid_form(buf, pos - {self.last_size}, pos) is None: raise NotSure")
            if into is not None:  # as fastavro's UUID gives it back
                self.emit(depth, f"{into} = {into}.lower()")
            return
        if kind in _SIMPLE:
            self.simple(depth, kind, into)
            return
        self.delegate(depth, schema, namespace, into)

    def decimal(self, depth: int, raw: str, schema: dict[str, Any], into: str | None = None) -> None:
        precision = int(schema.get("precision", 0))
        unscaled = self.var()
        self.emit(depth, f"{unscaled} = int.from_bytes({raw}, 'big', signed=True)")
        self.emit(depth, f"if abs({unscaled}) >= {10 ** precision}: raise NotSure")
        if into is not None:  # as fastavro makes it: the unscaled integer at the scale, in the precision's context
            context = self.constant(decimal.Context(prec=max(precision, 1)))
            self.emit(depth, f"{into} = Decimal({unscaled}).scaleb({-int(schema.get('scale', 0))}, {context})")

    def blocks(self, depth: int, schema: dict[str, Any], namespace: str | None, stack: tuple[str, ...],
               into: str | None = None) -> None:
        keyed = schema["type"] == "map"
        items = schema["values" if keyed else "items"]
        smallest = max(1, (1 if keyed else 0) + self.smallest(items))
        count, total = self.var(), self.var()
        self.emit(depth, f"{total} = 0")
        if into is not None:  # a map's entries as fastavro's dict holds them: a repeated key keeps its last value
            self.emit(depth, f"{into} = {{}}" if keyed else f"{into} = []")
        self.emit(depth, "while True:")
        self.varint(depth + 1, count, 10)
        self.emit(depth + 1, f"if {count} == 0: break")
        self.emit(depth + 1, f"if {count} < 0:")
        self.emit(depth + 2, f"{count} = -{count}")
        self.varint(depth + 2, "_", 10)
        self.emit(depth + 1, f"if {count} * {smallest} > end - pos: raise NotSure")
        self.emit(depth + 1, f"{total} += {count}")
        self.emit(depth + 1, f"if {total} > {limits.MAX_COLLECTION_ITEMS}: raise NotSure")
        self.emit(depth + 1, f"for _ in range({count}):")
        key, item = (self.var(), self.var()) if into is not None else (None, None)
        if keyed:
            self.simple(depth + 2, "string", key)
        before = len(self.lines)
        self.walk(depth + 2, items, namespace, stack, item)
        if into is not None:
            self.emit(depth + 2, f"{into}[{key}] = {item}" if keyed else f"{into}.append({item})")
        if len(self.lines) == before:
            self.emit(depth + 2, "pass")
        if into is not None and keyed:
            self.emit(depth, f"{into} = list({into}.items())")

    def resolve(self, name: str, namespace: str | None) -> str | None:
        for candidate in ([f"{namespace}.{name}", name] if namespace and "." not in name else [name]):
            if candidate in self.known and candidate in self.definitions:  # as the precise reader resolves it
                return candidate
        return None

    def simple(self, depth: int, kind: str, into: str | None = None) -> None:
        if kind == "null":
            if into is not None:
                self.emit(depth, f"{into} = None")
            return
        if kind == "boolean":
            self.emit(depth, "if buf[pos] > 1: raise NotSure")
            if into is not None:
                self.emit(depth, f"{into} = buf[pos] == 1")
            self.emit(depth, "pos += 1")
        elif kind in ("int", "long"):
            self.varint(depth, into or "_", 5 if kind == "int" else 10)
        elif kind in ("float", "double"):
            if into is not None:  # (past the end: struct.error, not sure)
                self.emit(depth, f"{into} = {'unpack_float' if kind == 'float' else 'unpack_double'}(buf, pos)[0]")
            self.emit(depth, f"pos += {4 if kind == 'float' else 8}")
            self.emit(depth, "if pos > end: raise NotSure")
        else:
            size = self.last_size = self.var()
            self.varint(depth, size, 10)
            limit = limits.MAX_STRING_BYTES if kind == "string" else limits.MAX_BYTES_LENGTH
            self.emit(depth, f"if {size} < 0 or {size} > {limit} or pos + {size} > end: raise NotSure")
            if kind == "string":
                self.emit(depth, f"{into + ' = ' if into else ''}buf[pos:pos + {size}].decode()")
            elif into is not None:
                self.emit(depth, f"{into} = buf[pos:pos + {size}]")
            self.emit(depth, f"pos += {size}")

    def union(self, depth: int, branches: list[Any], namespace: str | None, stack: tuple[str, ...],
              into: str | None = None) -> None:
        if into is not None and len([b for b in branches if b != "null"]) > 1 and not (
                all(isinstance(b, str) for b in branches) and {b for b in branches if b != "null"} in _WIDENED):
            raise _NoReader("a union of several types (a struct of members in the table)")
        index = self.var()
        self.varint(depth, index, 5)
        for i, branch in enumerate(branches):
            self.emit(depth, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            before = len(self.lines)
            self.walk(depth + 1, branch, namespace, stack, into)
            if len(self.lines) == before:
                self.emit(depth + 1, "pass")
        self.emit(depth, "else:" if branches else "if True:")
        self.emit(depth + 1, "raise NotSure")


def generated(schema: Any, precise: Callable[[Any, str | None], Callable[[bytes, int, str], int]],
              definitions: dict[str, Any], known: set[str],
              smallest: Callable[[Any], int]) -> Callable[[bytes], int] | None:
    """The walk of `schema` as one function (body -> where its value ends; raises when not sure), or None when
    it cannot be generated (the precise walk is then the only one). `precise(schema, namespace)` compiles a
    subschema's precise reader; `definitions`: the named types of the schema; `known`: the full names the precise
    reader resolves; `smallest(schema)`: the fewest bytes a value takes (`validate.min_size`)."""
    from ingestion.decode.validate import UUID_FORM  # validate imports this module

    writer = _Writer(precise, definitions, known, smallest)
    try:
        writer.walk(1, schema, None, ())
        source = "\n".join(["def walk(buf):", "    end = len(buf)", "    pos = 0", *writer.lines,
                            "    if pos > end: raise NotSure", "    return pos"])
        scope: dict[str, Any] = {"NotSure": _NotSure, "delegated": writer.delegated,
                                 "uuid_form": UUID_FORM.fullmatch}
        exec(compile(source, "<avro body walk>", "exec"), scope)
    except (RecursionError, SyntaxError, MemoryError, KeyError, TypeError, ValueError):
        return None
    walk: Callable[[bytes], int] = scope["walk"]
    return walk


def reader(schema: Any, precise: Callable[[Any, str | None], Callable[[bytes, int, str], int]],
           definitions: dict[str, Any], known: set[str],
           smallest: Callable[[Any], int]) -> Callable[[bytes, int], tuple[Any, ...]] | None:
    """The checked read of a record of `schema` (see the module): (buf, where the body starts) -> the tuple of its
    fields' values, raising on any fault (the caller then checks and reads the body as before) and when the body
    does not end at the buffer's end. None where the reader does not produce the values (the arguments as
    `generated`'s)."""
    from ingestion.decode.validate import UUID_FORM  # validate imports this module

    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error") or semantic(schema) is not None:
        return None
    writer = _Writer(precise, definitions, known, smallest)
    try:
        fields = schema.get("fields", [])
        values = [writer.var() for _ in fields]
        name = str(schema["name"])
        space = name.rsplit(".", 1)[0] if "." in name else schema.get("namespace")
        full = name if "." in name else (f"{space}.{name}" if space else name)
        for field, value in zip(fields, values, strict=True):
            writer.walk(1, field["type"], space, (full,), value)
        result = f"({', '.join(values)}{',' if len(values) == 1 else ''})"
        source = "\n".join(["def read(buf, pos):", "    end = len(buf)", *writer.lines,
                            "    if pos != end: raise NotSure", f"    return {result}"])
        scope: dict[str, Any] = {
            "NotSure": _NotSure, "delegated": writer.delegated, "constants": writer.constants,
            "uuid_form": UUID_FORM.fullmatch,
            "unpack_float": struct.Struct("<f").unpack_from, "unpack_double": struct.Struct("<d").unpack_from,
            "Decimal": decimal.Decimal}
        exec(compile(source, "<avro body read>", "exec"), scope)
    except (_NoReader, RecursionError, SyntaxError, MemoryError, KeyError, TypeError, ValueError):
        return None
    read: Callable[[bytes, int], tuple[Any, ...]] = scope["read"]
    return read
