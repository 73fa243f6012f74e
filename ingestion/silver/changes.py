"""Bronze rows as changes, and their fold by key and sequence: pure DataFrame functions, shared by the merge of
each step, the rebuild and the audit, so all three mean the same state.

A change row holds the row's own fields (the Debezium envelope's `after`, its `before` for a delete), then silver's
metadata columns (`spec.py`), and `_delete`. Ordering (`_order`): with `sequenceBy` a field, by that field (null
lowest), ties by offset; with `envelope: debezium` and `sequenceBy` unset, the same by the connector's position
(`order.py`: `source.lsn`, the binlog file and position, ...); with Kafka order, by offset when all of a key's
changes are in one partition, else by Kafka timestamp (a key in two partitions has no order Kafka promises:
`cross_partition` counts such keys); ties by topic and partition. The options: the fields kept (`columns` /
`exceptColumns`, in `changes`), truncates (`truncates.py`), `ignoreNullUpdates` (`_nulls_filled`) and
`trackHistoryOn` (`_versions`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.silver import order, truncates
from ingestion.silver.spec import (
    DEBEZIUM_COLUMNS,
    DELETE,
    HISTORY_COLUMNS,
    KAFKA_COLUMNS,
    KAFKA_KEY,
    SEQUENCE,
    SilverSpec,
    field_type,
)

# Silver's own columns and the fold's working ones: what is not one of the row's fields in a change row.
OWN = {*DEBEZIUM_COLUMNS, SEQUENCE, *KAFKA_COLUMNS, *HISTORY_COLUMNS, DELETE, "_partitions", "_changes", "_position",
       truncates.CLOSED}


def _partition() -> Column:
    return F.struct("_kafka_topic", "_kafka_partition")


def changes(bronze: DataFrame, spec: SilverSpec) -> DataFrame:
    """One change per bronze row that carries one: Debezium's tombstones (which follow its deletes) and operations
    other than c, u, r, d (truncate, message) carry none, nor do truncates (`truncates.of`); rows without a key are
    left out (`keyless` counts them). The row's fields are those silver keeps (`columns` / `exceptColumns`)."""
    schema = bronze.schema
    spec.check(schema)
    row_type = spec.kept_type(schema)
    kept = ~F.coalesce(F.expr(spec.truncate_when), F.lit(False)) if spec.truncate_when else F.lit(True)
    if spec.envelope == "debezium":
        op = F.col("op")
        rows = bronze.where(op.isin("c", "u", "r", "d") & ~F.col("_kafka_tombstone") & kept)
        delete = op == "d"
        image = F.when(delete, F.col("before")).otherwise(F.col("after"))
        payload = [image.getField(f.name).alias(f.name) for f in row_type.fields]
        source = F.col("source") if "source" in schema.fieldNames() else F.lit(None).cast("string")
        ts_ms = F.col("ts_ms") if "ts_ms" in schema.fieldNames() else F.lit(None).cast("long")
        extra = [op.alias("_op"), source.alias("_source"), ts_ms.alias("_ts_ms")]
    else:
        rows = bronze.where(kept)
        delete = F.col("_kafka_tombstone")
        payload = [_filled(f, spec, schema) for f in row_type.fields]
        extra = []
    if spec.delete_when:
        delete = delete | F.coalesce(F.expr(spec.delete_when), F.lit(False))
    if spec.sequenced:
        extra.append(_sequence(spec, schema).alias(SEQUENCE))
    history = [valid_from(spec, schema).alias("_valid_from")] if spec.history else []
    return rows.select(*payload, *extra, *[F.col(c) for c in KAFKA_COLUMNS], delete.alias(DELETE), *history)


def keyed(rows: DataFrame, spec: SilverSpec) -> DataFrame:
    """The change rows whose key fields are all known."""
    known = F.lit(True)
    for path in spec.key:
        known = known & F.col(path).isNotNull()
    return rows.where(known)


def key_condition(spec: SilverSpec, left: str, right: str) -> str:
    return " AND ".join(f"{left}.{p} = {right}.{p}" for p in spec.key)


def _by_key(spec: SilverSpec) -> WindowSpec:
    return Window.partitionBy(*[F.col(p) for p in spec.key])


def _positioned(rows: DataFrame, spec: SilverSpec) -> DataFrame:
    """`rows` with `_partitions` (in how many Kafka partitions the key's changes are) and `_position`, the first
    ordering column (see the module's doc)."""
    rows = rows.withColumn("_partitions", F.size(F.collect_set(_partition()).over(_by_key(spec))))
    if spec.sequenced:
        return rows.withColumn("_position", F.col(SEQUENCE))
    return rows.withColumn("_position", F.when(F.col("_partitions") == 1, F.col("_kafka_offset"))
                           .otherwise(F.unix_micros("_kafka_timestamp")))


def _order(*, descending: bool) -> list[Column]:
    """Position, then offset; ties (the same of both in two partitions) by topic and partition, as `fold_sql`."""
    columns = [F.col(c) for c in ("_position", "_kafka_offset", "_kafka_topic", "_kafka_partition")]
    if descending:
        return [columns[0].desc_nulls_last(), *[c.desc() for c in columns[1:]]]
    return [columns[0].asc_nulls_first(), *[c.asc() for c in columns[1:]]]


def latest(rows: DataFrame, spec: SilverSpec) -> DataFrame:
    """The newest change of each key (deletes included), with `_partitions` (in how many Kafka partitions the
    key's changes were) and `_changes` (how many there were)."""
    ranked = (_positioned(keyed(rows, spec), spec)
              .withColumn("_changes", F.count(F.lit(1)).over(_by_key(spec)))
              .withColumn("_rank", F.row_number().over(_by_key(spec).orderBy(*_order(descending=True)))))
    return ranked.where(F.col("_rank") == 1).drop("_rank", "_position")


def intervals(rows: DataFrame, spec: SilverSpec, cut: DataFrame | None = None) -> DataFrame:
    """History rows: each change valid from its time to the next change's (`_valid_to` null while current); a
    delete is a row valid for no time (`_valid_to = _valid_from`), and closes the row before it; a truncate (of
    `cut`) after a change and before the next one ends it at the truncate's time. With `ignoreNullUpdates` a null
    takes the value of the change before it; with `trackHistoryOn` the changes that leave those fields as they
    were fold into the row before them (`_versions`)."""
    by_key = _by_key(spec).orderBy(*_order(descending=False))
    rows = truncates.closed(_positioned(rows, spec), spec, cut, by_key)
    deleted, closed = F.col("_deleted"), F.col(truncates.CLOSED)
    ended = deleted | closed.isNotNull()
    if spec.ignore_null_updates:
        rows = _nulls_filled(rows, spec, ended, by_key)
    if spec.track_history_on:
        rows = _versions(rows, spec, ended, by_key)
    following = F.lead("_valid_from").over(by_key)
    return (rows.withColumn("_valid_to", F.when(deleted, F.col("_valid_from")).when(closed.isNotNull(), closed)
                            .otherwise(following))
            .withColumn("_is_current", ~deleted & closed.isNull() & F.lead(F.lit(1)).over(by_key).isNull())
            .drop("_position", "_partitions", truncates.CLOSED))


def _nulls_filled(rows: DataFrame, spec: SilverSpec, ended: Column, ordered: WindowSpec) -> DataFrame:
    """`ignoreNullUpdates`: each of the row's fields but the key's, where null, the newest value before it in the
    key's life (its changes since the last delete or truncate)."""
    whole = Window.unboundedPreceding
    rows = (rows.withColumn("_life", F.coalesce(F.lag(ended).over(ordered), F.lit(False)).cast("int"))
            .withColumn("_life", F.sum("_life").over(ordered.rowsBetween(whole, Window.currentRow))))
    life = (Window.partitionBy(*[F.col(p) for p in spec.key], F.col("_life")).orderBy(*_order(descending=False))
            .rowsBetween(whole, Window.currentRow))
    keys = {p.split(".")[0] for p in spec.key}
    fields = [c for c in rows.columns if c not in OWN and c not in keys and c != "_life"]
    return rows.withColumns({c: F.last(c, ignorenulls=True).over(life) for c in fields}).drop("_life")


def _versions(rows: DataFrame, spec: SilverSpec, ended: Column, ordered: WindowSpec) -> DataFrame:
    """`trackHistoryOn`: a change starts a new version when it is a key's first, a delete, follows a delete or a
    truncate, or changes a tracked field; else it updates the version before it: the version holds its newest
    change's values, valid from its first change's time."""
    same = F.lit(True)
    for c in spec.track_history_on:
        same = same & F.col(c).eqNullSafe(F.lag(c).over(ordered))
    after_end = F.lag(ended).over(ordered)
    fresh = after_end.isNull() | after_end | F.col("_deleted") | ~same
    whole = Window.unboundedPreceding
    rows = (rows.withColumn("_version", fresh.cast("int"))
            .withColumn("_version", F.sum("_version").over(ordered.rowsBetween(whole, Window.currentRow))))
    version = Window.partitionBy(*[F.col(p) for p in spec.key], F.col("_version"))
    first = F.first("_valid_from").over(version.orderBy(*_order(descending=False))
                                        .rowsBetween(whole, Window.unboundedFollowing))
    return (rows.withColumn("_first_from", first)
            .withColumn("_rank", F.row_number().over(version.orderBy(*_order(descending=True))))
            .where(F.col("_rank") == 1)
            .withColumn("_valid_from", F.col("_first_from")).drop("_version", "_first_from", "_rank"))


def as_history(change_rows: DataFrame) -> DataFrame:
    """Change rows in history's shape, before their intervals are known."""
    return change_rows.withColumnRenamed(DELETE, "_deleted")


def truncates_of(bronze: DataFrame, spec: SilverSpec) -> DataFrame | None:
    """The truncate rows of bronze (`truncates.of`), with the sequence and time a change of theirs would have."""
    schema = bronze.schema
    return truncates.of(bronze, spec, valid_from(spec, schema), _sequence(spec, schema) if spec.sequenced else None)


def fold(bronze: DataFrame, spec: SilverSpec) -> tuple[DataFrame, DataFrame | None]:
    """What silver holds for these bronze rows, from nothing: upsert, each live key's newest change after the last
    truncate (and the keys whose newest change is a delete, the markers); history, every change with its interval."""
    return fold_changes(keyed(changes(bronze, spec), spec), spec, truncates_of(bronze, spec))


def fold_changes(rows: DataFrame, spec: SilverSpec, cut: DataFrame | None) -> tuple[DataFrame, DataFrame | None]:
    """`fold` of keyed change rows and the truncates (`truncates_of`, None: none) among them."""
    if spec.history:
        return intervals(as_history(rows), spec, cut), None
    rows = truncates.surviving(rows, spec, cut)
    if spec.ignore_null_updates:
        ordered = _by_key(spec).orderBy(*_order(descending=False))
        rows = _nulls_filled(_positioned(rows, spec), spec, F.col(DELETE), ordered).drop("_position", "_partitions")
    newest = latest(rows, spec)
    return (newest.where(~F.col(DELETE)).drop(DELETE, "_partitions", "_changes"),
            markers(newest.where(F.col(DELETE)), spec))


def markers(deletes: DataFrame, spec: SilverSpec) -> DataFrame:
    """Delete markers: the key's fields as `_key0..`, and the delete's ordering columns."""
    kept = [SEQUENCE] if spec.sequenced else []
    return deletes.select(*[F.col(p).alias(spec.marker_column(i)) for i, p in enumerate(spec.key)],
                          *kept, "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")


def newer(spec: SilverSpec, new: str, old: str) -> str:
    """SQL: the change `new` comes after the row (or marker) `old` of the same key. Kafka order compares offsets
    within one partition; a key's change from another partition counts as newer (it arrived later). Written in the
    dialect Spark, DuckDB and delta-rs (DataFusion) all parse: the driver's step (`rs_step`) uses it too."""
    other_partition = (f"({new}._kafka_topic <> {old}._kafka_topic OR "
                       f"{new}._kafka_partition <> {old}._kafka_partition)")
    later = f"({other_partition} OR {new}._kafka_offset > {old}._kafka_offset)"
    if not spec.sequenced:
        return later
    seq_new, seq_old = f"{new}.{SEQUENCE}", f"{old}.{SEQUENCE}"
    return (f"({seq_new} > {seq_old} OR ({seq_old} IS NULL AND {seq_new} IS NOT NULL) OR "
            f"(({seq_new} IS NOT DISTINCT FROM {seq_old}) AND {later}))")


def valid_from(spec: SilverSpec, schema: T.StructType) -> Column:
    """When a change took effect: the Debezium source's `ts_ms` (the database's commit time), else the envelope's
    `ts_ms`; the `sequenceBy` field when it is a time; else the Kafka timestamp."""
    if spec.envelope == "debezium":
        times = []
        source = field_type(schema, "source")
        if isinstance(source, T.StructType) and "ts_ms" in source.fieldNames():
            times.append(F.timestamp_millis(F.col("source.ts_ms").cast("long")))
        if "ts_ms" in schema.fieldNames():
            times.append(F.timestamp_millis(F.col("ts_ms").cast("long")))
        return F.coalesce(*times, F.col("_kafka_timestamp"))
    if spec.sequence_by and isinstance(_sequence_type(spec, schema), (T.TimestampType, T.TimestampNTZType,
                                                                       T.DateType)):
        return F.coalesce(_sequence(spec, schema).cast("timestamp"), F.col("_kafka_timestamp"))
    return F.col("_kafka_timestamp")


def _sequence_type(spec: SilverSpec, schema: T.StructType) -> T.DataType | None:
    assert spec.sequence_by
    found = field_type(schema, spec.sequence_by)
    if found is None and spec.envelope == "debezium":
        found = field_type(spec.row_type(schema), spec.sequence_by)
    return found


def _sequence(spec: SilverSpec, schema: T.StructType) -> Column:
    """The `sequenceBy` field: of the bronze row (an envelope field such as source.lsn), else of the row's image;
    unset with `envelope: debezium`, the connector's position (`order.spark_sql`, `fold_sql`'s twin)."""
    if spec.by_source:
        found = order.of(schema, spec.file)
        return F.expr(order.spark_sql(found)).cast(order.spark_type(found))
    assert spec.sequence_by
    if field_type(schema, spec.sequence_by) is not None:
        return F.col(spec.sequence_by)
    image = F.when(F.col("op") == "d", F.col("before")).otherwise(F.col("after"))
    for part in spec.sequence_by.split("."):
        image = image.getField(part)
    return image


def _filled(field: T.StructField, spec: SilverSpec, schema: T.StructType) -> Column:
    """A top-level field of the row; a tombstone has none, so its key fields are taken from the Kafka key (a
    record's field of the same path, or the whole key when it is not a record and the key is one field)."""
    keys = [p for p in spec.key if p.split(".")[0] == field.name]
    column = F.col(field.name)
    if not keys:
        return column.alias(field.name)
    for path in keys:
        fallback = _from_kafka_key(path, spec, schema)
        if fallback is None:
            continue
        column = _with_path(column, field.dataType, path.split(".")[1:], fallback)
    return F.when(F.col("_kafka_tombstone"), column).otherwise(F.col(field.name)).alias(field.name)


def _from_kafka_key(path: str, spec: SilverSpec, schema: T.StructType) -> Column | None:
    target = field_type(spec.row_type(schema), path)
    key_type = schema[KAFKA_KEY].dataType
    if isinstance(key_type, T.StructType):
        found = field_type(key_type, path)
        return None if found is None or target is None else F.col(f"{KAFKA_KEY}.{path}").cast(target)
    if len(spec.key) == 1 and target is not None and not isinstance(target, T.StructType):
        return F.col(KAFKA_KEY).cast(T.StringType()).cast(target) if isinstance(key_type, T.BinaryType) \
            else F.col(KAFKA_KEY).cast(target)
    return None


def _with_path(column: Column, kind: T.DataType, rest: list[str], value: Column) -> Column:
    """`column` (of type `kind`) with the nested field at `rest` set to `value` where it is null, building the
    records on the way where they are null themselves."""
    if not rest:
        return F.coalesce(column, value)
    assert isinstance(kind, T.StructType)
    return F.struct(*[
        (_with_path(column.getField(f.name), f.dataType, rest[1:], value) if f.name == rest[0]
         else column.getField(f.name)).alias(f.name)
        for f in kind.fields])
