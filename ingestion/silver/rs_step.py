"""A silver step made by the driver, with no Spark job: the new bronze rows read with delta-rs (bronze's change
feed) and folded in DuckDB with Spark's rules (`fold_sql`): in upsert mode each key's newest change, the marker
check and the counts (`latest_query`, the twin of `changes.latest`); in history mode the new rows and the
intervals of the keys they touch (`intervals_query`, the twin of `changes.intervals`). Then delta-rs appends the
markers and MERGEs the rows. Each commit carries what Spark's would (`table.py`): the transaction id (txnAppId
`spec.txn_app_id(epoch)`, txnVersion the bronze version) and the ledger record, so a step redone after a crash is
skipped whichever engine made it, and the two engines' steps follow each other on one table.

It is the step's engine when the step is small enough to hold in the driver's memory (at most
`silver.directMergeMaxChanges` new bronze rows) and the table is one it can write as Spark would: not the options
that refold (`ignoreNullUpdates`, `trackHistoryOn`), a key of top-level fields, and silver's columns those of the
changes (a column to add or widen is Spark's `_evolve`). Otherwise `Declined` says why, raised before the step
commits anything but (at most) its markers, which Spark's step then finds committed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from ingestion import faults
from ingestion.delta import log_checkpoints, rs_reads
from ingestion.delta.reader import JvmFreeReadError
from ingestion.delta.rs_append import RsTable, RsWriteError
from ingestion.errors import one_line
from ingestion.silver import fold_sql
from ingestion.silver import ledger as silver_ledger
from ingestion.silver import table as silver_table
from ingestion.silver.changes import newer
from ingestion.silver.fold_sql import BRONZE, name
from ingestion.silver.ledger import SilverRecord
from ingestion.silver.spec import DELETE, SEQUENCE, SilverSpec

log = logging.getLogger(__name__)

_ORDERING = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")


class Declined(Exception):  # a reason for Spark to make the step, not an error the user sees
    """Why this step is not the driver's."""


@dataclass(frozen=True)
class Outcome:
    """A driver step's record (with what its MERGE did), and whether it committed the rows' MERGE (False: the
    table held its transaction already, the step had no key to merge, or the MERGE changed no row, which delta-rs
    does not commit: the caller then records the step in a commit of no rows)."""

    record: SilverRecord
    merged: bool


def refusal(spec: SilverSpec) -> str | None:
    """Why no step of this silver table is the driver's, or None."""
    if spec.direct_merge_max_changes <= 0:
        return "silver.directMergeMaxChanges is 0"
    if spec.refolds:
        return "ignoreNullUpdates or trackHistoryOn refold the keys a step touches"
    if any("." in p for p in spec.key):
        return "a key field is nested"
    return None


def merge(spec: SilverSpec, record: SilverRecord, storage_options: dict[str, str] | None) -> Outcome:
    """Merge the changes of bronze versions (record.bronze_from, record.bronze_version] into silver."""
    why = refusal(spec)
    if why:
        raise Declined(why)
    rows, bronze = _new_rows(spec, record, storage_options)
    con = _connect()
    con.register(BRONZE, rows)
    cut = fold_sql.truncates_query(spec, bronze)
    if cut is not None and con.sql(f"SELECT count(*) FROM ({cut})").fetchall()[0][0]:
        raise Declined("the versions hold a truncate (a rebuild applies it)")
    silver = RsTable(spec.path, storage_options)
    target = _table(silver)
    cut = _recorded_truncates(con, spec, bronze, record)
    if spec.history:
        return _history_step(con, spec, bronze, cut, silver, target, record)
    markers = RsTable(spec.markers_path, storage_options)
    _latest(con, spec, bronze, cut)
    _mark(con, spec, markers)
    keys, changes, deletes, cross = con.sql(
        f"SELECT count(*), coalesce(sum(_changes), 0), count(*) FILTER ({name(DELETE)}), count(*) FILTER (__multi) "
        f"FROM __latest").fetchall()[0]
    record = replace(record, keys=int(keys), changes=int(changes), cross_partition_keys=int(cross))
    if not keys:
        return Outcome(record, merged=False)
    source = _source(con, target)
    if not spec.sequenced:
        record = replace(record, cross_partition_keys=record.cross_partition_keys + _moved(con, spec, silver))
    if deletes:
        _append_markers(con, spec, markers, record)
        faults.reached(faults.FaultPoint.SILVER_BETWEEN_COMMITS, record.bronze_version)
    return _merge_rows(spec, silver, source, record)


def _history_step(con: Any, spec: SilverSpec, bronze: T.StructType, cut: str | None, silver: RsTable,
                  target: pa.Schema, record: SilverRecord) -> Outcome:
    """History mode (`table.SilverTable._merge_history`): the step's changes become rows; the intervals of the keys
    they touch are recomputed from those keys' rows in silver, read narrow (the key, the ordering columns, the
    interval), and the MERGE's source is what changes: the new rows, and the rows whose end or currency moves."""
    keys = [f"__k{i}" for i in range(len(spec.key))]
    changes_sql, _ = fold_sql.changes_query(spec, bronze)
    keyed = ", ".join(f"{fold_sql.path(p)} AS {k}" for p, k in zip(spec.key, keys, strict=True))
    try:
        con.execute(f"CREATE TEMP TABLE __new AS SELECT * FROM (SELECT *, {keyed} FROM ({changes_sql})) "
                    f"WHERE {' AND '.join(f'{k} IS NOT NULL' for k in keys)}")
    except Exception as exc:  # noqa: BLE001 - a condition in Spark's dialect DuckDB does not parse: Spark's step
        raise Declined(f"DuckDB: {one_line(exc)[:200]}") from None
    count, distinct = con.sql(f"SELECT count(*), count(DISTINCT ({', '.join(keys)})) FROM __new").fetchall()[0]
    record = replace(record, keys=int(distinct), changes=int(count))
    if not count:
        return Outcome(record, merged=False)
    columns, _ = _shape(con, "SELECT * FROM __new LIMIT 0")
    own = [c for c in columns if not c.startswith("__") and c != DELETE]
    if sorted([*own, "_deleted", "_valid_to", "_is_current"]) != sorted(target.names):
        raise Declined("silver's columns differ from the changes' (Spark's step adds them)")
    coordinates = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    narrow = list(dict.fromkeys([*spec.key, *([SEQUENCE] if spec.sequenced else []), *_ORDERING, "_valid_from",
                                 "_deleted", "_valid_to", "_is_current"]))
    con.register("__held", _read(silver, narrow, _first_key(con, spec, "__new")))
    same_key = " AND ".join(f"h.{name(p)} = n.{k}" for p, k in zip(spec.key, keys, strict=True))
    con.execute(f"CREATE TEMP TABLE __touched AS SELECT h.* EXCLUDE (_deleted, _valid_to, _is_current), "
                f"{', '.join(f'h.{name(p)} AS {k}' for p, k in zip(spec.key, keys, strict=True))}, "
                f"h._deleted AS {name(DELETE)}, h._valid_to AS _was_to, h._is_current AS _was_current, "
                f"FALSE AS _new FROM __held h WHERE EXISTS (SELECT 1 FROM __new n WHERE {same_key})")
    same_row = " AND ".join(f"t.{c} = n.{c}" for c in coordinates)
    fresh = (f"SELECT n.*, TRUE AS _new FROM __new n WHERE NOT EXISTS (SELECT 1 FROM __touched t WHERE "
             f"{same_row})")
    both = f"SELECT * FROM __touched UNION ALL BY NAME {fresh}"
    moved = ("_new OR NOT (_was_to IS NOT DISTINCT FROM _valid_to AND _was_current IS NOT DISTINCT FROM "
             "_is_current)")
    assign = ", ".join(name(c) if c != "_deleted" else f"{name(DELETE)} AS _deleted" for c in target.names)
    rows = con.sql(f"SELECT {assign}, _new FROM ({fold_sql.intervals_query(spec, both, cut)}) WHERE {moved}"
                   ).fetch_arrow_table()
    source = _in_types(rows, target, "_new")
    on = " AND ".join([*(f"t.{name(p)} = s.{name(p)}" for p in spec.key), *(f"t.{c} = s.{c}" for c in coordinates)])
    return _commit(spec, silver, source, record, on, delete_when=None, update_when="NOT s._new",
                   update={c: f"s.{c}" for c in ("_valid_to", "_is_current")}, insert_when="s._new",
                   insert={name(c): f"s.{name(c)}" for c in target.names})


def _new_rows(spec: SilverSpec, record: SilverRecord,
              storage_options: dict[str, str] | None) -> tuple[pa.Table, T.StructType]:
    """The rows bronze versions (bronze_from, bronze_version] added (its change feed's inserts), of bronze's own
    types, and bronze's schema; Declined when there are more than the step may hold or delta-rs cannot read them."""
    limit = spec.direct_merge_max_changes
    try:
        found = rs_reads.change_feed(spec.bronze_path, record.bronze_from + 1, record.bronze_version,
                                     storage_options, limit)
    except JvmFreeReadError as exc:
        raise Declined(f"bronze's change feed: {one_line(exc)[:200]}") from None
    if found is None:
        raise Declined(f"more than {limit} new bronze rows (silver.directMergeMaxChanges)")
    return found[0], T.StructType.fromJson(json.loads(found[1]))


def _table(silver: RsTable) -> pa.Schema:
    """Silver's columns (its Arrow schema); Declined when delta-rs cannot write the table."""
    try:
        silver.current()
    except RsWriteError as exc:
        raise Declined(str(exc)) from None
    refused = silver.refusal(silver.schema())
    if refused:
        raise Declined(refused)
    return silver.schema()


def _recorded_truncates(con: Any, spec: SilverSpec, bronze: T.StructType, record: SilverRecord) -> str | None:
    """The truncates the state has applied (its ledger's) as a query of `_t_*` columns (`fold_sql.truncates_query`'s
    shape) over the connection's `__recorded`; None when there are none."""
    if not record.truncates:
        return None
    kind = dict(zip(*_shape(con, f"SELECT * FROM ({fold_sql.changes_query(spec, bronze)[0]}) LIMIT 0"),
                    strict=True)).get(SEQUENCE)
    micros = pa.timestamp("us", tz="UTC")
    topics, partitions, offsets, times, sequences, ats = zip(*record.truncates, strict=True)
    con.register("__recorded", pa.table({
        "__topic": pa.array(topics, pa.string()), "__partition": pa.array(partitions, pa.int32()),
        "__offset": pa.array(offsets, pa.int64()), "__time": pa.array(times, pa.int64()).cast(micros),
        "__sequence": pa.array(sequences, pa.string()), "__at": pa.array(ats, pa.int64()).cast(micros)}))
    # the ledger holds a sequence as text, a record's as its JSON
    sequence = ("CAST(NULL AS VARCHAR)" if kind is None else f"CAST(CAST(__sequence AS JSON) AS {kind})"
                if kind.startswith("STRUCT") else f"CAST(__sequence AS {kind})")
    return (f"SELECT __topic AS _t_topic, __partition AS _t_partition, __offset AS _t_offset, __time AS "
            f"_t_timestamp, {sequence} AS _t_sequence, __at AS _t_at FROM __recorded")


def _latest(con: Any, spec: SilverSpec, bronze: T.StructType, cut: str | None) -> None:
    """The step's newest change per key (`fold_sql.latest_query`) into the connection's table `__latest`, the
    changes ordered before a truncate the state has applied (`cut`) left out."""
    query, _ = fold_sql.latest_query(spec, bronze, cut)
    try:
        con.execute(f"CREATE TEMP TABLE __latest AS {query}")
    except Exception as exc:  # noqa: BLE001 - a condition in Spark's dialect DuckDB does not parse: Spark's step
        raise Declined(f"DuckDB: {one_line(exc)[:200]}") from None


def _mark(con: Any, spec: SilverSpec, markers: RsTable) -> None:
    """`__marked`: `__latest` with `_marked`, the key's newest change an upsert that does not pass each of the
    key's markers (`table.SilverTable._marked`): such a change is not inserted."""
    held = _rows(markers)
    if held is None or held.num_rows == 0:
        con.execute("CREATE TEMP TABLE __marked AS SELECT *, FALSE AS _marked FROM __latest")
        return
    con.register("__markers", held)
    same = " AND ".join(f"m.{name(spec.marker_column(i))} = l.__k{i}" for i in range(len(spec.key)))
    con.execute(f"CREATE TEMP TABLE __marked AS SELECT l.*, (NOT l.{name(DELETE)} AND EXISTS (SELECT 1 FROM "
                f"__markers m WHERE {same} AND NOT coalesce({newer(spec, 'l', 'm')}, FALSE))) AS _marked "
                f"FROM __latest l")


def _rows(table: RsTable) -> pa.Table | None:
    """Every row of the table (the markers: keys and orderings); None when there is none; Declined when delta-rs
    cannot read it."""
    try:
        table.current()
    except RsWriteError:
        return None
    return _read(table, table.schema().names)


def _source(con: Any, target: pa.Schema) -> pa.Table:
    """The MERGE's source: silver's columns of `__marked` in silver's types, with `_delete` and `_marked`; Declined
    when the changes have a column silver lacks, or another type (Spark's step adds or widens it)."""
    columns, _ = _shape(con, "SELECT * FROM __latest LIMIT 0")
    own = [c for c in columns if not c.startswith("__") and c not in (DELETE, "_changes")]
    if sorted(own) != sorted(target.names):
        raise Declined("silver's columns differ from the changes' (Spark's step adds them)")
    rows = con.sql(f"SELECT {', '.join(name(c) for c in target.names)}, {name(DELETE)}, _marked "
                   f"FROM __marked").fetch_arrow_table()
    return _in_types(rows, target, DELETE, "_marked")


def _in_types(rows: pa.Table, target: pa.Schema, *flags: str) -> pa.Table:
    """`rows` (silver's columns, then the boolean `flags`) cast to silver's types; Declined when a column has
    another type than silver's (Spark's step widens it) or does not cast."""
    for wanted, found in zip(target, rows.schema, strict=False):
        if not _same_type(wanted.type, found.type):
            raise Declined(f"silver's column {wanted.name} is {wanted.type}, the changes' {found.type}")
    try:
        return rows.cast(pa.schema([*target, *(pa.field(f, pa.bool_()) for f in flags)]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise Declined(f"the changes do not cast to silver's types: {one_line(exc)[:200]}") from None


def _moved(con: Any, spec: SilverSpec, silver: RsTable) -> int:
    """Keys of the step (all their changes in one Kafka partition) whose row in silver came from another
    partition (`table.SilverTable._moved`)."""
    keys = [name(p) for p in spec.key]
    con.register("__held", _read(silver, [*spec.key, "_kafka_topic", "_kafka_partition"],
                                 _first_key(con, spec, "__latest")))
    same = " AND ".join(f"t.{k} = l.__k{i}" for i, k in enumerate(keys))
    return int(con.sql(f"SELECT count(*) FROM __latest l JOIN __held t ON {same} WHERE NOT l.__multi AND "
                       f"(l._kafka_topic <> t._kafka_topic OR l._kafka_partition <> t._kafka_partition)")
               .fetchall()[0][0])


def _append_markers(con: Any, spec: SilverSpec, markers: RsTable, record: SilverRecord) -> None:
    """A marker for each key whose newest change of the step is a delete, in one commit before the rows' (as
    `table.SilverTable._append_markers`); every `MARKERS_REWRITE_EVERY`th version the table is rewritten whole
    into one file."""
    ordering = [*([SEQUENCE] if spec.sequenced else []), *_ORDERING]
    rows = con.sql(f"SELECT {', '.join(f'__k{i} AS {name(spec.marker_column(i))}' for i in range(len(spec.key)))}, "
                   f"{', '.join(name(c) for c in ordering)} FROM __latest WHERE {name(DELETE)}").fetch_arrow_table()
    try:
        table = markers.current()
    except RsWriteError as exc:
        raise Declined(f"no markers table delta-rs writes: {exc}") from None
    target = markers.schema()
    overwrite = (int(table.version()) + 1) % silver_table.MARKERS_REWRITE_EVERY == 0
    try:
        rows = rows.select(target.names).cast(target)
        held = _rows(markers) if overwrite else None
        if held is not None:  # held is in the table's own types (`RsTable.rows`)
            rows = pa.concat_tables([held.select(target.names), rows])
        done = markers.append(rows, app_id=spec.txn_app_id(record.epoch, "deletes"),
                              txn_version=record.bronze_version, user_metadata=record.to_user_metadata(),
                              overwrite=overwrite)
    except (RsWriteError, KeyError, pa.ArrowInvalid) as exc:
        raise Declined(f"the markers: {one_line(exc)[:200]}") from None
    if done.committed:
        _checkpoint(markers, done.version)


def _merge_rows(spec: SilverSpec, silver: RsTable, source: pa.Table, record: SilverRecord) -> Outcome:
    """The MERGE of the step's newest change per key (`table.SilverTable._merge_rows`, in DataFusion's SQL), in one
    commit with the step's transaction id and record; skipped when silver holds that transaction already."""
    is_newer = newer(spec, "s", "t")
    assign = {name(c): f"s.{name(c)}" for c in source.column_names if c not in (DELETE, "_marked")}
    return _commit(spec, silver, source, record, " AND ".join(f"t.{name(p)} = s.{name(p)}" for p in spec.key),
                   delete_when=f"s.{DELETE} AND {is_newer}", update_when=f"NOT s.{DELETE} AND {is_newer}",
                   update=assign, insert_when=f"NOT s.{DELETE} AND NOT s._marked", insert=assign)


def _commit(spec: SilverSpec, silver: RsTable, source: pa.Table, record: SilverRecord, on: str,
            **clauses: Any) -> Outcome:
    """One delta-rs MERGE of `source` into silver (`RsTable.merge`'s `clauses`) with the step's transaction id and
    record, then the log checkpoint it may be due; Declined when delta-rs refuses it (nothing committed)."""
    try:
        done = silver.merge(source, on, app_id=spec.txn_app_id(record.epoch), txn_version=record.bronze_version,
                            user_metadata=record.to_user_metadata(), **clauses)
    except RsWriteError as exc:
        raise Declined(str(exc)) from None
    if done.committed:
        _checkpoint(silver, int(silver.table().version()))
    return Outcome(_counted(record, dict(done.metrics)), merged=done.committed)


def _counted(record: SilverRecord, metrics: dict[str, Any]) -> SilverRecord:
    found = silver_ledger.with_outcome(record, {k: str(v) for k, v in metrics.items()})
    return found if found is not None else record


def _checkpoint(table: RsTable, version: int) -> None:
    """The log checkpoint the table is due at `version` (no Delta writer makes one inline for delta-rs's commits)."""
    try:
        properties = table.table().metadata().configuration
        log_checkpoints.checkpoint_if_due(table.path, version, properties, table.storage_options)
    except Exception as exc:  # noqa: BLE001 - the next one catches up; the commit stands
        log.warning("%s: no log checkpoint at version %d: %s", table.path, version, one_line(exc))


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether values of type `b` are silver's type `a` as they are: the same type but for Arrow's string, binary
    and list encodings (records field by field, in order)."""
    if pa.types.is_struct(a) or pa.types.is_struct(b):
        return (pa.types.is_struct(a) and pa.types.is_struct(b) and a.num_fields == b.num_fields
                and all(a.field(i).name == b.field(i).name and _same_type(a.field(i).type, b.field(i).type)
                        for i in range(a.num_fields)))
    if _is_list(a) or _is_list(b):
        return _is_list(a) and _is_list(b) and _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) or pa.types.is_map(b):
        return (pa.types.is_map(a) and pa.types.is_map(b) and _same_type(a.key_type, b.key_type)
                and _same_type(a.item_type, b.item_type))
    for kind in (_is_string, _is_binary):
        if kind(a) or kind(b):
            return kind(a) and kind(b)
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    return a == b or pa.types.is_null(b)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _read(table: RsTable, columns: list[str], where: tuple[str, pa.Array] | None = None) -> pa.Table:
    """The table's `columns` of the rows `where` names, or of all (`RsTable.rows`); Declined when delta-rs cannot
    read them."""
    try:
        return table.rows(columns, where)
    except Exception as exc:  # noqa: BLE001
        raise Declined(f"delta-rs cannot read {table.path}: {one_line(exc)[:200]}") from None


def _first_key(con: Any, spec: SilverSpec, table: str) -> tuple[str, pa.Array]:
    """The first key field and its values in the step's `table` (`__k0`): silver's rows are read for those only (a
    superset of the step's keys when the key has more fields; the joins after it match them all)."""
    values = con.sql(f"SELECT DISTINCT __k0 FROM {table}").fetch_arrow_table().column(0).combine_chunks()
    return spec.key[0], values


def _shape(con: Any, query: str) -> tuple[list[str], list[str]]:
    """A query's column names and DuckDB types."""
    relation = con.sql(query)
    return list(relation.columns), [str(t) for t in relation.types]


def _connect() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # Spark's session time zone here (runtime/session.py)
    return con
