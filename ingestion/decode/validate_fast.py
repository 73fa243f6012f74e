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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingestion import limits

_SIMPLE = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_MAX_DEPTH = 40  # nested unions and records beyond this are delegated (Python's indentation limit is 100)


class _NotSure(Exception):
    """The generated walk found something the precise walk must look at."""


class _Writer:
    def __init__(self, precise: Callable[[Any, str | None], Callable[[bytes, int, str], int]],
                 definitions: dict[str, Any], known: set[str], smallest: Callable[[Any], int]) -> None:
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

    def varint(self, depth: int, target: str, most: int) -> None:
        self.emit(depth, "b = buf[pos]")
        self.emit(depth, "if b < 128:")
        self.emit(depth + 1, f"{target} = (b >> 1) ^ -(b & 1)")
        self.emit(depth + 1, "pos += 1")
        self.emit(depth, "else:")
        self.emit(depth + 1, f"{target}, pos = varint(buf, pos, '', '', {most})")

    def delegate(self, depth: int, schema: Any, namespace: str | None) -> None:
        self.delegated.append(self.precise(schema, namespace))
        self.emit(depth, f"pos = delegated[{len(self.delegated) - 1}](buf, pos, '')")

    def walk(self, depth: int, schema: Any, namespace: str | None, stack: tuple[str, ...]) -> None:
        if depth > _MAX_DEPTH:
            self.delegate(depth, schema, namespace)
            return
        if isinstance(schema, list):
            self.union(depth, schema, namespace, stack)
            return
        if isinstance(schema, str):
            if schema in _SIMPLE:
                self.simple(depth, schema)
                return
            full = self.resolve(schema, namespace)
            if full is None or full in stack:
                self.delegate(depth, schema, namespace)  # the precise reader resolves it, or names the fault
                return
            self.walk(depth, self.definitions[full], full.rsplit(".", 1)[0] if "." in full else None,
                      (*stack, full))
            return
        kind = schema.get("type")
        if kind in ("record", "error"):
            name = str(schema["name"])
            space = name.rsplit(".", 1)[0] if "." in name else schema.get("namespace", namespace)
            full = name if "." in name else (f"{space}.{name}" if space else name)
            for field in schema.get("fields", []):
                self.walk(depth, field["type"], space, (*stack, full))
            return
        if kind == "enum":
            index = self.var()
            self.varint(depth, index, 5)
            self.emit(depth, f"if not 0 <= {index} < {len(schema.get('symbols', []))}: raise NotSure")
            return
        logical = schema.get("logicalType")
        if kind == "fixed":
            size = int(schema["size"])
            self.emit(depth, f"pos += {size}")
            self.emit(depth, "if pos > end: raise NotSure")
            if logical == "decimal" and size:
                self.decimal(depth, f"buf[pos - {size}:pos]", schema)
            return
        if kind in ("array", "map"):
            self.blocks(depth, schema, namespace, stack)
            return
        if kind in ("int", "long") and logical in self.ranges:
            value = self.var()
            self.varint(depth, value, 5 if kind == "int" else 10)
            low, high, _ = self.ranges[logical]
            self.emit(depth, f"if not {low} <= {value} <= {high}: raise NotSure")
            return
        if kind == "bytes" and logical == "decimal":
            length = self.var()
            self.varint(depth, length, 10)
            self.emit(depth, f"if {length} < 1 or {length} > {limits.MAX_BYTES_LENGTH} or pos + {length} > end: "
                             "raise NotSure")
            self.emit(depth, f"pos += {length}")
            self.decimal(depth, f"buf[pos - {length}:pos]", schema)
            return
        if kind == "string" and logical == "uuid":
            self.simple(depth, "string")
            self.emit(depth, f"if not uuid(buf, pos - {self.last_size}, pos): raise NotSure")
            return
        if kind in _SIMPLE:
            self.simple(depth, kind)
            return
        self.delegate(depth, schema, namespace)

    def decimal(self, depth: int, raw: str, schema: dict[str, Any]) -> None:
        limit = 10 ** int(schema.get("precision", 0))
        self.emit(depth, f"if abs(int.from_bytes({raw}, 'big', signed=True)) >= {limit}: raise NotSure")

    def blocks(self, depth: int, schema: dict[str, Any], namespace: str | None, stack: tuple[str, ...]) -> None:
        keyed = schema["type"] == "map"
        items = schema["values" if keyed else "items"]
        smallest = max(1, (1 if keyed else 0) + self.smallest(items))
        count, total = self.var(), self.var()
        self.emit(depth, f"{total} = 0")
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
        if keyed:
            self.simple(depth + 2, "string")
        before = len(self.lines)
        self.walk(depth + 2, items, namespace, stack)
        if len(self.lines) == before:
            self.emit(depth + 2, "pass")

    def resolve(self, name: str, namespace: str | None) -> str | None:
        for candidate in ([f"{namespace}.{name}", name] if namespace and "." not in name else [name]):
            if candidate in self.known and candidate in self.definitions:  # as the precise reader resolves it
                return candidate
        return None

    def simple(self, depth: int, kind: str) -> None:
        if kind == "null":
            return
        if kind == "boolean":
            self.emit(depth, "if buf[pos] > 1: raise NotSure")
            self.emit(depth, "pos += 1")
        elif kind in ("int", "long"):
            self.varint(depth, "_", 5 if kind == "int" else 10)
        elif kind in ("float", "double"):
            self.emit(depth, f"pos += {4 if kind == 'float' else 8}")
            self.emit(depth, "if pos > end: raise NotSure")
        else:
            size = self.last_size = self.var()
            self.varint(depth, size, 10)
            limit = limits.MAX_STRING_BYTES if kind == "string" else limits.MAX_BYTES_LENGTH
            self.emit(depth, f"if {size} < 0 or {size} > {limit} or pos + {size} > end: raise NotSure")
            if kind == "string":
                self.emit(depth, f"buf[pos:pos + {size}].decode()")
            self.emit(depth, f"pos += {size}")

    def union(self, depth: int, branches: list[Any], namespace: str | None, stack: tuple[str, ...]) -> None:
        index = self.var()
        self.varint(depth, index, 5)
        for i, branch in enumerate(branches):
            self.emit(depth, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            before = len(self.lines)
            self.walk(depth + 1, branch, namespace, stack)
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
    from ingestion.decode.validate import UUID_FORM, _varint  # validate imports this module

    writer = _Writer(precise, definitions, known, smallest)
    try:
        writer.walk(1, schema, None, ())
        source = "\n".join(["def walk(buf):", "    end = len(buf)", "    pos = 0", *writer.lines,
                            "    if pos > end: raise NotSure", "    return pos"])
        scope: dict[str, Any] = {"NotSure": _NotSure, "varint": _varint, "delegated": writer.delegated,
                                 "uuid": lambda buf, start, end: UUID_FORM.fullmatch(buf, start, end) is not None}
        exec(compile(source, "<avro body walk>", "exec"), scope)
    except (RecursionError, SyntaxError, MemoryError, KeyError, TypeError, ValueError):
        return None
    walk: Callable[[bytes], int] = scope["walk"]
    return walk
