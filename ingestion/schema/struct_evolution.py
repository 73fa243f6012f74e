"""How a table's columns and a record's own schema (both Spark types) meet: for formats whose records carry their
schema (`connect-json`), each record's schema is that record's writer schema.

- `fit`: whether a record of its own type `own` can be a row of a table of `table` as it is: every field of `own`
  is a column (nested ones too) of the same type or one its values fit into (a narrower integer, a float into a
  double); a column the record lacks reads null. Else the first field that is new to the table, or the first whose
  type the table cannot take.
- `merge`: the columns a table becomes to hold both (fields added at the end of their struct, nested ones too;
  a column widened where Delta's type widening allows it), or the field that stops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

# (narrower, wider): the values of the first fit a column of the second, and Delta's type widening widens a
# column of the first to the second.
WIDER: frozenset[tuple[type[T.DataType], type[T.DataType]]] = frozenset({
    (T.ByteType, T.ShortType), (T.ByteType, T.IntegerType), (T.ByteType, T.LongType), (T.ShortType, T.IntegerType),
    (T.ShortType, T.LongType), (T.IntegerType, T.LongType), (T.FloatType, T.DoubleType)})


@dataclass(frozen=True)
class Fit:
    """Where a record's type meets a table's: `conflict` the first field the table cannot take (a line naming it),
    else `new` the first field the table must add or widen first; both None when the record fits as it is."""

    conflict: str | None = None
    new: str | None = None


def _narrower(own: T.DataType, table: T.DataType) -> bool:
    return (type(own), type(table)) in WIDER


def _kinds(own: T.DataType, table: T.DataType) -> bool:
    """Both the same kind of container, whose members are compared one by one."""
    return any(isinstance(own, k) and isinstance(table, k) for k in (T.StructType, T.ArrayType, T.MapType))


def _differs(path: str, own: T.DataType, table: T.DataType) -> str:
    return (f"{path}: the record's schema makes it {own.simpleString()}, the table's column is "
            f"{table.simpleString()}")


def fit(own: T.DataType, table: T.DataType, path: str) -> Fit:
    """See the module."""
    if own == table or _narrower(own, table):
        return Fit()
    if _narrower(table, own):
        return Fit(new=f"{path}: {own.simpleString()}, wider than the table's {table.simpleString()}")
    if not _kinds(own, table):
        return Fit(conflict=_differs(path, own, table))
    new = None
    for sub_path, mine, theirs in _members(own, table, path):
        if theirs is None:
            new = new or f"{sub_path}: a field the table does not have"
            continue
        found = fit(mine, theirs, sub_path)
        if found.conflict:
            return found
        new = new or found.new
    return Fit(new=new)


def _members(own: T.DataType, table: T.DataType, path: str) -> list[tuple[str, T.DataType, T.DataType | None]]:
    if isinstance(own, T.StructType) and isinstance(table, T.StructType):
        columns = {f.name: f.dataType for f in table.fields}
        return [(f"{path}.{f.name}", f.dataType, columns.get(f.name)) for f in own.fields]
    if isinstance(own, T.ArrayType) and isinstance(table, T.ArrayType):
        return [(f"{path}[]", own.elementType, table.elementType)]
    assert isinstance(own, T.MapType) and isinstance(table, T.MapType)
    return [(f"{path}<key>", own.keyType, table.keyType), (f"{path}<value>", own.valueType, table.valueType)]


def merge(table: T.StructType, own: T.StructType, *, widen: bool, path: str = "$") -> T.StructType | str:
    """The columns a table of `table` becomes to take records of `own` (see the module); else the reason, naming
    the field, that it cannot (a type changed, or widened with `widen` off)."""
    merged = _merge(table, own, widen, path)
    assert not isinstance(merged, T.DataType) or isinstance(merged, T.StructType)
    return merged


def _merge(table: T.DataType, own: T.DataType, widen: bool, path: str) -> T.DataType | str:
    if own == table or _narrower(own, table):
        return table
    if _narrower(table, own):
        return own if widen else f"{_differs(path, own, table)} (sink.typeWidening is off)"
    if isinstance(table, T.StructType) and isinstance(own, T.StructType):
        columns = {f.name: f.dataType for f in own.fields}
        fields = []
        for f in table.fields:
            if f.name not in columns:
                fields.append(f)
                continue
            merged = _merge(f.dataType, columns[f.name], widen, f"{path}.{f.name}")
            if isinstance(merged, str):
                return merged
            fields.append(T.StructField(f.name, merged, True, f.metadata))
        known = {f.name for f in table.fields}
        fields += [T.StructField(f.name, f.dataType, True) for f in own.fields if f.name not in known]
        return T.StructType(fields)
    if isinstance(table, T.ArrayType) and isinstance(own, T.ArrayType):
        items = _merge(table.elementType, own.elementType, widen, f"{path}[]")
        return items if isinstance(items, str) else T.ArrayType(items, table.containsNull)
    if isinstance(table, T.MapType) and isinstance(own, T.MapType) and table.keyType == own.keyType:
        values = _merge(table.valueType, own.valueType, widen, f"{path}<value>")
        return values if isinstance(values, str) else T.MapType(table.keyType, values, table.valueContainsNull)
    return _differs(path, own, table)


def changed(old: T.StructType, new: T.StructType, prefix: str = "") -> list[str]:
    """The columns of `new` (dotted paths, with their type) that `old` lacks or holds as another type."""
    columns = {f.name: f.dataType for f in old.fields}
    found = []
    for f in new.fields:
        before = columns.get(f.name)
        if isinstance(before, T.StructType) and isinstance(f.dataType, T.StructType):
            found += changed(before, f.dataType, f"{prefix}{f.name}.")
        elif before != f.dataType:
            found.append(f"{prefix}{f.name} {f.dataType.simpleString()}")
    return found
