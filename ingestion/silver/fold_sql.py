"""The fold of bronze by key and sequence (`changes.fold`) as one DuckDB query over bronze's rows: what `verify`
compares silver with, without a JVM. Each rule of `changes` has its counterpart here, in the same order (the
change rows, the keyed ones, the ordering, the newest change per key or the intervals), and the tests hold both
folds equal on the same bronze (tombstones, delete conditions, Debezium's envelope, Kafka order and a field's).

`NotInDuckDB` says why a fold cannot be written for DuckDB (a type it has no name for here, a `deleteWhen`
condition DuckDB does not parse); the caller then folds with Spark.
"""

from __future__ import annotations

from pyspark.sql import types as T

from ingestion.config import conditions
from ingestion.silver import order
from ingestion.silver.spec import DELETE, KAFKA_COLUMNS, KAFKA_KEY, SEQUENCE, SilverSpec, field_type

BRONZE = "__bronze"  # the relation of bronze's rows the query reads


class NotInDuckDB(Exception):  # a reason to fold with Spark, not an error the user sees
    """Why the fold of this bronze is not written for DuckDB."""


def name(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def path(dotted: str, root: str | None = None) -> str:
    """A (nested) field by its dotted path: `a.b` is field b of column a (never table a's column b); with `root`,
    every part is a field of that expression."""
    parts = dotted.split(".")
    out = root if root is not None else name(parts.pop(0))
    for part in parts:
        out = f"struct_extract({out}, {_literal(part)})"
    return out


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def fold_query(spec: SilverSpec, bronze: T.StructType) -> tuple[str, list[str]]:
    """The query (over `BRONZE`, bronze's rows) of what silver holds, and its columns, as `changes.fold` gives
    them: upsert, each live key's newest change after the last truncate; history, every change with its interval."""
    cut = truncates_query(spec, bronze)
    # Upsert drops what a truncate removes before anything is ordered (`truncates.surviving` in `changes`).
    ctes, columns, by_key = _positioned(spec, bronze, cut, drop_truncated=not spec.history)
    shown = [c for c in columns if c not in (DELETE, "_valid_from")]
    ordered = f"PARTITION BY {by_key} {_ASCENDING}"
    filled = spec.filled_fields(bronze) if spec.ignore_null_updates else []
    select = ", ".join(name(c) for c in shown)
    if spec.history:
        ctes.append(("__closed", _closed(spec, cut, ordered)))
        ended = f"({name(DELETE)} OR _closed_at IS NOT NULL)"
        if filled:
            ctes.append(("__filled", _nulls_filled("__closed", filled, ended, by_key, _ASCENDING)))
        if spec.track_history_on:
            ctes.append(("__versions", _versions(spec, ctes[-1][0], ended, by_key, _ASCENDING)))
        query = (f"{_with(ctes)}SELECT {select}, {name(DELETE)} AS _deleted, _valid_from, "
                 f"CASE WHEN {name(DELETE)} THEN _valid_from WHEN _closed_at IS NOT NULL THEN _closed_at "
                 f"ELSE lead(_valid_from) OVER __h END AS _valid_to, "
                 f"(NOT {name(DELETE)} AND _closed_at IS NULL AND lead(1) OVER __h IS NULL) AS _is_current "
                 f"FROM {ctes[-1][0]} WINDOW __h AS ({ordered})")
        return query, [*shown, "_deleted", "_valid_from", "_valid_to", "_is_current"]
    if filled:
        ctes.append(("__filled", _nulls_filled("__positioned", filled, name(DELETE), by_key, _ASCENDING)))
    query = (f"{_with(ctes)}SELECT {select} FROM (SELECT *, {_newest(by_key)} AS __rank FROM {ctes[-1][0]}) "
             f"WHERE __rank = 1 AND NOT {name(DELETE)}")
    return query, shown


def latest_query(spec: SilverSpec, bronze: T.StructType, cut: str | None) -> tuple[str, list[str]]:
    """`changes.latest` of an upsert step's change rows over `BRONZE`, after `truncates.surviving` (`cut`: the
    query of the truncates the state has applied, `_t_*` columns as `truncates_query` gives them; None: none):
    each key's newest change, deletes included, with `_changes` (the key's changes) and `__multi` (they are in
    two or more Kafka partitions); also the key as `__k0..`. The query and its columns."""
    ctes, columns, by_key = _positioned(spec, bronze, cut, drop_truncated=True)
    keys = [f"__k{i}" for i in range(len(spec.key))]
    query = (f"{_with(ctes)}SELECT * EXCLUDE (__rank, __position) FROM (SELECT *, count(*) OVER "
             f"(PARTITION BY {by_key}) AS _changes, {_newest(by_key)} AS __rank FROM __positioned) WHERE __rank = 1")
    return query, [*columns, *keys, "__multi", "_changes"]


# A key's changes in order (`changes._order`): position, offset, then topic and partition for ties (the same
# position and offset in two partitions).
_TIES = "_kafka_topic, _kafka_partition"
_ASCENDING = f"ORDER BY __position ASC NULLS FIRST, _kafka_offset ASC, {_TIES}"


def _newest(by_key: str) -> str:
    """1 for each key's newest change."""
    return (f"row_number() OVER (PARTITION BY {by_key} ORDER BY __position DESC NULLS LAST, _kafka_offset DESC, "
            f"{_TIES} DESC)")


def _positioned(spec: SilverSpec, bronze: T.StructType, cut: str | None,
                drop_truncated: bool) -> tuple[list[tuple[str, str]], list[str], str]:
    """The common start of both folds: the change rows (`__changes`), the truncates (`__truncates`, from `cut`)
    and the keyed change rows with their ordering (`__positioned`: `__k0..`, `__position`, `__multi`), less those
    a truncate removes when `drop_truncated`; the CTEs, the change rows' columns, the key's column list."""
    rows, columns = changes_query(spec, bronze)
    keys = [f"__k{i}" for i in range(len(spec.key))]
    keyed = (f"SELECT *, {', '.join(f'{path(p)} AS {k}' for p, k in zip(spec.key, keys, strict=True))} "
             f"FROM __changes")
    ctes = [("__changes", rows), *([("__truncates", cut)] if cut is not None else []),
            ("__positioned", _ordered(spec, keyed, cut is not None and drop_truncated))]
    return ctes, columns, ", ".join(keys)


def _ordered(spec: SilverSpec, keyed: str, surviving: bool) -> str:
    """The rows of `keyed` (a query whose rows have the key as `__k0..`) whose key is known, with `__multi` (the
    key's rows are in two or more Kafka partitions) and `__position`, the first ordering column; `surviving`: less
    the rows a truncate (`__truncates`) removes."""
    keys = [f"__k{i}" for i in range(len(spec.key))]
    known = " AND ".join(f"{k} IS NOT NULL" for k in keys)
    dropped = f" AND NOT EXISTS (SELECT 1 FROM __truncates WHERE {_before(spec)})" if surviving else ""
    # A key's changes in one Kafka partition are ordered by offset; in several, by Kafka timestamp (`_positioned`).
    multi = ("(min(_kafka_partition) OVER __w <> max(_kafka_partition) OVER __w OR "
             "min(_kafka_topic) OVER __w <> max(_kafka_topic) OVER __w)")
    position = (name(SEQUENCE) if spec.sequenced else
                "CASE WHEN NOT __multi THEN _kafka_offset ELSE epoch_us(_kafka_timestamp) END")
    return (f"SELECT *, {position} AS __position FROM (SELECT *, {multi} AS __multi FROM ({keyed}) "
            f"WHERE {known}{dropped} WINDOW __w AS (PARTITION BY {', '.join(keys)}))")


def intervals_query(spec: SilverSpec, rows: str, cut: str | None) -> str:
    """`changes.intervals` of a history step's rows: `rows`, a query whose rows have the key as `__k0..`, the
    ordering columns, `_delete` and `_valid_from`; `cut`, the truncates (`_t_*` columns; None: none). Each row with
    `_valid_to` and `_is_current`: valid until the key's next row, a delete for no time, a row a truncate finds
    current closed at its time."""
    by_key = ", ".join(f"__k{i}" for i in range(len(spec.key)))
    ordered = f"PARTITION BY {by_key} {_ASCENDING}"
    ctes = [("__keyed", rows), *([("__truncates", cut)] if cut is not None else []),
            ("__positioned", _ordered(spec, "SELECT * FROM __keyed", False)), ("__closed", _closed(spec, cut, ordered))]
    return (f"{_with(ctes)}SELECT * EXCLUDE (__position, __multi, _closed_at), "
            f"CASE WHEN {name(DELETE)} THEN _valid_from WHEN _closed_at IS NOT NULL THEN _closed_at "
            f"ELSE lead(_valid_from) OVER __h END AS _valid_to, "
            f"(NOT {name(DELETE)} AND _closed_at IS NULL AND lead(1) OVER __h IS NULL) AS _is_current "
            f"FROM __closed WINDOW __h AS ({ordered})")


def _with(ctes: list[tuple[str, str]]) -> str:
    return "WITH " + ", ".join(f"{n} AS ({q})" for n, q in ctes) + " "


def truncates_query(spec: SilverSpec, bronze: T.StructType) -> str | None:
    """`changes.truncates_of` over `BRONZE`: the truncate rows' coordinates, sequence and time; None when nothing
    truncates."""
    if not spec.truncate_when:
        return None
    sequence = _sequence(spec, bronze) if spec.sequenced else "CAST(NULL AS VARCHAR)"
    return (f"SELECT _kafka_topic AS _t_topic, _kafka_partition AS _t_partition, _kafka_offset AS _t_offset, "
            f"_kafka_timestamp AS _t_timestamp, {sequence} AS _t_sequence, {_valid_from(spec, bronze)} AS _t_at "
            f"FROM {BRONZE} WHERE coalesce(({_condition(spec.truncate_when)}), FALSE)")


def _before(spec: SilverSpec, prefix: str = "") -> str:
    """`truncates.before`: the change (its columns `prefix`ed) is ordered before the truncate (`_t_*`)."""
    topic, partition, offset, at = (name(f"{prefix}{c}") for c in ("_kafka_topic", "_kafka_partition",
                                                                   "_kafka_offset", "_kafka_timestamp"))
    same = f"({topic} = _t_topic AND {partition} = _t_partition)"
    kafka = f"(({same} AND {offset} < _t_offset) OR (NOT {same} AND {at} < _t_timestamp))"
    if not spec.sequenced:
        return kafka
    mine = name(f"{prefix}{SEQUENCE}")
    return (f"(CASE WHEN _t_sequence IS NULL THEN {kafka} ELSE ({mine} IS NULL OR {mine} < _t_sequence OR "
            f"({mine} = _t_sequence AND {kafka})) END)")


def _closed(spec: SilverSpec, cut: str | None, ordered: str) -> str:
    """`truncates.closed`: each change with `_closed_at`, the time of the first truncate between it and the key's
    next change."""
    if cut is None:
        return "SELECT *, CAST(NULL AS TIMESTAMPTZ) AS _closed_at FROM __positioned"
    ordering = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
                *([SEQUENCE] if spec.sequenced else [])]
    nexts = ", ".join(f"lead({name(c)}) OVER __n AS {name('__next' + c)}" for c in ordering)
    closing = (f"(SELECT min(_t_at) FROM __truncates WHERE {_before(spec)} AND (__next_kafka_offset IS NULL OR "
               f"NOT {_before(spec, '__next')}))")
    return (f"SELECT * EXCLUDE ({', '.join(name('__next' + c) for c in ordering)}), {closing} AS _closed_at "
            f"FROM (SELECT *, {nexts} FROM __positioned WINDOW __n AS ({ordered}))")


def _nulls_filled(source: str, fields: list[str], ended: str, by_key: str, ascending: str) -> str:
    """`changes._nulls_filled`: each field, where null, the newest value before it in the key's life."""
    lives = (f"SELECT *, sum(CAST(coalesce(__ended_before, FALSE) AS INTEGER)) OVER (PARTITION BY {by_key} "
             f"{ascending} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS __life FROM (SELECT *, lag({ended}) "
             f"OVER (PARTITION BY {by_key} {ascending}) AS __ended_before FROM {source})")
    fills = ", ".join(f"last_value({name(f)} IGNORE NULLS) OVER __l AS {name(f)}" for f in fields)
    return (f"SELECT * EXCLUDE (__life, __ended_before) REPLACE ({fills}) FROM ({lives}) WINDOW __l AS "
            f"(PARTITION BY {by_key}, __life {ascending} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)")


def _versions(spec: SilverSpec, source: str, ended: str, by_key: str, ascending: str) -> str:
    """`changes._versions`: the changes that leave the tracked fields as they were folded into the version before
    them, which holds its newest change's values from its first change's time."""
    same = " AND ".join(f"{name(c)} IS NOT DISTINCT FROM lag({name(c)}) OVER __v" for c in spec.track_history_on)
    fresh = (f"CASE WHEN lag({ended}) OVER __v IS NULL OR lag({ended}) OVER __v OR {name(DELETE)} OR NOT ({same}) "
             f"THEN 1 ELSE 0 END")
    flagged = f"SELECT *, {fresh} AS __fresh FROM {source} WINDOW __v AS (PARTITION BY {by_key} {ascending})"
    numbered = (f"SELECT *, sum(__fresh) OVER (PARTITION BY {by_key} {ascending} ROWS BETWEEN UNBOUNDED PRECEDING "
                f"AND CURRENT ROW) AS __version FROM ({flagged})")
    descending = ("ORDER BY __position DESC NULLS LAST, _kafka_offset DESC, _kafka_topic DESC, "
                  "_kafka_partition DESC")
    ranked = (f"SELECT *, first_value(_valid_from) OVER (PARTITION BY {by_key}, __version {ascending} ROWS BETWEEN "
              f"UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS __first, row_number() OVER (PARTITION BY {by_key}, "
              f"__version {descending}) AS __rank FROM ({numbered})")
    return (f"SELECT * EXCLUDE (__fresh, __version, __first, __rank) REPLACE (__first AS _valid_from) "
            f"FROM ({ranked}) WHERE __rank = 1")


def changes_query(spec: SilverSpec, bronze: T.StructType) -> tuple[str, list[str]]:
    """`changes.changes` over `BRONZE`: one change row per bronze row that carries one; the query and its
    columns (the row's fields, silver's metadata columns, `_delete`, and `_valid_from` in history mode)."""
    spec.check(bronze)
    row_type = spec.kept_type(bronze)
    names = bronze.fieldNames()
    selected: list[tuple[str, str]] = []  # (expression, column)
    kept = f" AND NOT coalesce(({_condition(spec.truncate_when)}), FALSE)" if spec.truncate_when else ""
    if spec.envelope == "debezium":
        where = f"op IN ('c', 'u', 'r', 'd') AND NOT _kafka_tombstone{kept}"
        delete = "(op = 'd')"
        selected += [(_image(f.name), f.name) for f in row_type.fields]
        selected += [("op", "_op"), (name("source") if "source" in names else "CAST(NULL AS VARCHAR)", "_source"),
                     (name("ts_ms") if "ts_ms" in names else "CAST(NULL AS BIGINT)", "_ts_ms")]
    else:
        where = f"TRUE{kept}"
        delete = "_kafka_tombstone"
        selected += [(_filled(f, spec, bronze), f.name) for f in row_type.fields]
    if spec.delete_when:
        delete = f"({delete} OR coalesce(({_condition(spec.delete_when)}), FALSE))"
    if spec.sequenced:
        selected.append((_sequence(spec, bronze), SEQUENCE))
    selected += [(name(c), c) for c in KAFKA_COLUMNS]
    selected.append((delete, DELETE))
    if spec.history:
        selected.append((_valid_from(spec, bronze), "_valid_from"))
    columns = [c for _, c in selected]
    return f"SELECT {', '.join(f'{e} AS {name(c)}' for e, c in selected)} FROM {BRONZE} WHERE {where}", columns


def _condition(text: str) -> str:
    """`silver.deleteWhen`, written in Spark SQL, for DuckDB: `quoted` identifiers in double quotes. Where the
    dialects part, DuckDB refuses to parse or bind it and Spark folds instead: a text DuckDB does not read as one
    condition by itself is not put in this query (`a) OR (b` would read as one here); Spark's parser, which takes
    it alone, decides."""
    if (why := conditions.problem(text)) is not None:
        raise NotInDuckDB(f"the condition {text!r} {why} in DuckDB")
    out, quoted = [], False
    for part in text.split("'"):
        out.append(part if quoted else part.replace("`", '"'))
        quoted = not quoted
    return "'".join(out)


def _image(field: str) -> str:
    return f"struct_extract(CASE WHEN op = 'd' THEN \"before\" ELSE \"after\" END, {_literal(field)})"


def _sequence(spec: SilverSpec, bronze: T.StructType) -> str:
    """The `sequenceBy` field: of the bronze row (an envelope field such as source.lsn), else of the row's
    image; unset with `envelope: debezium`, the connector's position (`changes._sequence`, `order.duckdb_sql`)."""
    if spec.by_source:
        return order.duckdb_sql(order.of(bronze, spec.file), path)
    assert spec.sequence_by
    if field_type(bronze, spec.sequence_by) is not None:
        return path(spec.sequence_by)
    first, *rest = spec.sequence_by.split(".")
    return path(".".join(rest), _image(first)) if rest else _image(first)


def _valid_from(spec: SilverSpec, bronze: T.StructType) -> str:
    """`changes.valid_from`: the Debezium source's ts_ms, else the envelope's; the `sequenceBy` field when it is a
    time; else the Kafka timestamp. Times as TIMESTAMPTZ (the session's time zone is UTC, as Spark's is)."""
    if spec.envelope == "debezium":
        times = []
        source = field_type(bronze, "source")
        if isinstance(source, T.StructType) and "ts_ms" in source.fieldNames():
            times.append(f"CAST(epoch_ms(CAST({path('source.ts_ms')} AS BIGINT)) AS TIMESTAMPTZ)")
        if "ts_ms" in bronze.fieldNames():
            times.append("CAST(epoch_ms(CAST(ts_ms AS BIGINT)) AS TIMESTAMPTZ)")
        return f"coalesce({', '.join([*times, '_kafka_timestamp'])})"
    if spec.sequence_by:
        kind = field_type(bronze, spec.sequence_by)
        if kind is None and spec.envelope == "debezium":
            kind = field_type(spec.row_type(bronze), spec.sequence_by)
        if isinstance(kind, T.TimestampType | T.TimestampNTZType | T.DateType):
            return f"coalesce(CAST({_sequence(spec, bronze)} AS TIMESTAMPTZ), _kafka_timestamp)"
    return "_kafka_timestamp"


def _filled(field: T.StructField, spec: SilverSpec, bronze: T.StructType) -> str:
    """`changes._filled`: a top-level field of the row; a tombstone's key fields taken from the Kafka key."""
    keys = [p for p in spec.key if p.split(".")[0] == field.name]
    column = name(field.name)
    if not keys:
        return column
    filled = column
    for key in keys:
        fallback = _from_kafka_key(key, spec, bronze)
        if fallback is not None:
            filled = _with_path(filled, field.dataType, key.split(".")[1:], fallback)
    return f"CASE WHEN _kafka_tombstone THEN {filled} ELSE {column} END"


def _from_kafka_key(key: str, spec: SilverSpec, bronze: T.StructType) -> str | None:
    target = field_type(spec.row_type(bronze), key)
    key_type = bronze[KAFKA_KEY].dataType
    if isinstance(key_type, T.StructType):
        found = field_type(key_type, key)
        return None if found is None or target is None else f"CAST({path(key, name(KAFKA_KEY))} AS {sql_type(target)})"
    if len(spec.key) == 1 and target is not None and not isinstance(target, T.StructType):
        text = f"decode({name(KAFKA_KEY)})" if isinstance(key_type, T.BinaryType) else name(KAFKA_KEY)
        return f"CAST({text} AS {sql_type(target)})"
    return None


def _with_path(column: str, kind: T.DataType, rest: list[str], value: str) -> str:
    """`changes._with_path`: `column` with the nested field at `rest` set to `value` where it is null, the records
    on the way built where they are null themselves."""
    if not rest:
        return f"coalesce({column}, {value})"
    if not isinstance(kind, T.StructType):
        raise NotInDuckDB(f"the key path part {rest[0]!r} is not in a record")
    fields = [f"{name(f.name)} := " + (_with_path(f"struct_extract({column}, {_literal(f.name)})", f.dataType,
                                                  rest[1:], value) if f.name == rest[0]
                                       else f"struct_extract({column}, {_literal(f.name)})")
              for f in kind.fields]
    return f"struct_pack({', '.join(fields)})"


_SCALARS: dict[type[T.DataType], str] = {
    T.BooleanType: "BOOLEAN", T.ByteType: "TINYINT", T.ShortType: "SMALLINT", T.IntegerType: "INTEGER",
    T.LongType: "BIGINT", T.FloatType: "FLOAT", T.DoubleType: "DOUBLE", T.StringType: "VARCHAR",
    T.BinaryType: "BLOB", T.DateType: "DATE", T.TimestampType: "TIMESTAMPTZ", T.TimestampNTZType: "TIMESTAMP"}


def sql_type(kind: T.DataType) -> str:
    """DuckDB's name of a Spark type (the types bronze's columns have)."""
    if isinstance(kind, T.DecimalType):
        return f"DECIMAL({kind.precision}, {kind.scale})"
    if isinstance(kind, T.StructType):
        return f"STRUCT({', '.join(f'{name(f.name)} {sql_type(f.dataType)}' for f in kind.fields)})"
    if isinstance(kind, T.ArrayType):
        return f"{sql_type(kind.elementType)}[]"
    if isinstance(kind, T.MapType):
        return f"MAP({sql_type(kind.keyType)}, {sql_type(kind.valueType)})"
    found = _SCALARS.get(type(kind))
    if found is None:
        raise NotInDuckDB(f"no DuckDB type for {kind.simpleString()}")
    return found
