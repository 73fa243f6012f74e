"""Reading a pipeline's tables without a JVM: the Delta log and the data files through delta-rs (`deltalake`),
the columns through pyarrow and numpy. The `TableReader` of the read-only commands (see `reader`).

delta-rs reads the tables this project writes (reader version 1, writer version 2, and reader 3 / writer 7 with
the typeWidening feature once a column was widened); `tests/integration/test_jvm_free_reads.py` holds every answer
equal to Spark's. Where it cannot read a table, `JvmFreeReadError` says why and the caller reads with Spark.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion.config import PipelineConfig
from ingestion.delta.ledger import BatchRecord, next_offsets
from ingestion.delta.reader import (
    Bounds,
    HeldPartition,
    JvmFreeReadError,
    QuarantinedRecord,
    QuarantineGroup,
    TableLayout,
)
from ingestion.delta.restorable import Commit, oldest_restorable

log = logging.getLogger(__name__)

TOPIC, PARTITION, OFFSET = "_kafka_topic", "_kafka_partition", "_kafka_offset"


class DeltaRsReader:
    """Reads through delta-rs. One instance per command: a table is opened once and reused."""

    name = "delta-rs"

    def __init__(self, storage_options: dict[str, str] | None = None) -> None:
        self._storage_options = storage_options
        self._tables: dict[str, Any] = {}

    def _table(self, path: str) -> Any:
        """The DeltaTable at `path` (its latest version), None when there is none."""
        if path in self._tables:
            return self._tables[path]
        try:
            from deltalake import DeltaTable
            from deltalake.exceptions import TableNotFoundError
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise JvmFreeReadError(f"delta-rs is not installed: {exc}") from None
        try:
            table = DeltaTable(path, storage_options=self._storage_options)
        except TableNotFoundError:
            table = None
        except Exception as exc:  # noqa: BLE001 - an unsupported feature or store: the caller reads with Spark
            raise _cannot(path, exc) from None
        self._tables[path] = table
        return table

    def history(self, path: str) -> list[BatchRecord]:
        table = self._table(path)
        if table is None:
            return []
        try:
            commits = table.history()
        except Exception as exc:  # noqa: BLE001
            raise _cannot(path, exc) from None
        records = []
        for commit in commits:
            when = _commit_file_millis(path, commit.get("version")) or commit.get("timestamp")
            committed_at = (dt.datetime.fromtimestamp(when / 1000, tz=dt.UTC).replace(tzinfo=None)
                            if isinstance(when, int) else None)
            record = BatchRecord.from_user_metadata(commit.get("userMetadata"), commit.get("version"), committed_at)
            if record is not None:
                records.append(record)
        return sorted(records, key=lambda r: r.version or 0)

    def version(self, path: str) -> int | None:
        table = self._table(path)
        return None if table is None else int(table.version())

    def rows(self, path: str) -> int | None:
        """The table's rows now; None when there is no table."""
        found = self._columns(path, ["count(*) AS n"], [], raw=True)
        return None if found is None else int(found.column("n")[0].as_py())

    def committed_millis(self, path: str, version: int) -> int | None:
        """When `version` of the table was committed, in ms, as Spark's history tells it; None when unknown."""
        table = self._table(path)
        if table is None:
            return None
        found = _commit_file_millis(path, version)
        if found is not None:
            return found
        try:
            newest = int(table.version())
            commits = table.history(newest - version + 1) if newest >= version else []
        except Exception as exc:  # noqa: BLE001
            raise _cannot(path, exc) from None
        return next((int(c["timestamp"]) for c in commits if c.get("version") == version), None)

    def layout(self, path: str) -> TableLayout | None:
        import time

        import pyarrow as pa
        import pyarrow.compute as pc

        table = self._table(path)
        if table is None:
            return None
        try:
            actions = pa.table(table.get_add_actions(flatten=True))
            commits = [Commit(int(c["version"]), _commit_file_millis(path, c.get("version")) or int(c["timestamp"]),
                              str(c.get("operation")), dict(c.get("operationParameters") or {}))
                       for c in table.history()]
            properties = dict(table.metadata().configuration)
        except Exception as exc:  # noqa: BLE001
            raise _cannot(path, exc) from None
        size = int(pc.sum(actions.column("size_bytes")).as_py() or 0) if actions.num_rows else 0
        return TableLayout(actions.num_rows, size, oldest_restorable(commits, properties, int(time.time() * 1000)))

    def _columns(self, path: str, columns: list[str], filters: list[tuple[str, str, Any]], raw: bool = False) -> Any:
        """A pyarrow Table of `columns` (with `raw`, SQL expressions) of the rows that pass every filter ((column, op,
        value), op one of =, >=, <=, in), None without a table. Read with delta-rs's own query engine (DataFusion):
        it honours the Delta protocol and skips files by their statistics, and unlike `to_pyarrow_table` its threads
        do not race the interpreter's exit (that abort, 'terminate called without an active exception', hit 1 run
        in 4 here)."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        table = self._table(path)
        if table is None:
            return None
        where = " AND ".join(_condition(column, op, value) for column, op, value in filters)
        shown = columns if raw else [_name(c) for c in columns]  # raw: expressions as they are
        sql = f"SELECT {', '.join(shown)} FROM t" + (f" WHERE {where}" if where else "")
        try:
            found = pa.table(QueryBuilder().register("t", table).execute(sql))
        except Exception as exc:  # noqa: BLE001
            raise _cannot(path, exc) from None
        # DataFusion hands strings and bytes out as view types, which pyarrow's grouping does not take as keys.
        views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
        return found.cast(pa.schema([f.with_type(views.get(f.type, f.type)) for f in found.schema]))

    def _coordinates(self, paths: Sequence[str], topic: str,
                     extra: list[tuple[str, str, Any]] | None = None) -> tuple[Any, Any]:
        """(partitions, offsets) as numpy arrays of every row of `topic` in the tables, sorted by both."""
        import numpy as np
        import pyarrow as pa

        parts = [t for p in paths
                 if (t := self._columns(p, [PARTITION, OFFSET], [(TOPIC, "=", topic), *(extra or [])])) is not None]
        if not parts:
            return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
        rows = pa.concat_tables([t.cast(pa.schema([(PARTITION, pa.int64()), (OFFSET, pa.int64())])) for t in parts])
        partitions = rows.column(PARTITION).to_numpy()
        offsets = rows.column(OFFSET).to_numpy()
        order = np.lexsort((offsets, partitions))
        return partitions[order], offsets[order]

    def held(self, paths: Sequence[str], topic: str, bounds: Bounds, limit: int) -> dict[int, HeldPartition]:
        import numpy as np

        partitions, offsets = self._coordinates(paths, topic)
        out: dict[int, HeldPartition] = {}
        starts = np.flatnonzero(np.diff(partitions)) + 1
        for segment in np.split(np.arange(len(offsets)), starts) if len(offsets) else []:
            partition = int(partitions[segment[0]])
            held = offsets[segment]
            repeated = held[1:] == held[:-1]
            duplicates = np.unique(held[1:][repeated])[:limit]
            distinct = held[np.concatenate(([True], ~repeated))]
            gaps: list[tuple[int, int]] = []
            if partition in bounds:
                first, last = bounds[partition]
                steps = np.flatnonzero(np.diff(distinct) > 1)
                gaps = [(int(distinct[i]) + 1, int(distinct[i + 1]) - 1) for i in steps]
                if distinct[0] > first:
                    gaps.append((first, int(distinct[0]) - 1))
                if distinct[-1] < last:
                    gaps.append((int(distinct[-1]) + 1, last))
            out[partition] = HeldPartition(partition, len(distinct), tuple(int(o) for o in duplicates),
                                           tuple(sorted(gaps)))
        for partition, (first, last) in bounds.items():
            out.setdefault(partition, HeldPartition(partition, 0, (), ((first, last),)))
        return out

    def held_between(self, paths: Sequence[str], topic: str, partition: int, first: int, last: int) -> set[int]:
        _, offsets = self._coordinates(paths, topic, [(PARTITION, "=", partition), (OFFSET, ">=", first),
                                                      (OFFSET, "<=", last)])
        return {int(o) for o in offsets}

    def quarantined_per_partition(self, path: str, topic: str) -> dict[int, int]:
        rows = self._columns(path, [PARTITION], [(TOPIC, "=", topic)])
        if rows is None or not rows.num_rows:
            return {}
        counts = rows.group_by(PARTITION).aggregate([(PARTITION, "count")])
        return dict(zip((int(p) for p in counts.column(PARTITION).to_pylist()),
                        (int(c) for c in counts.column(f"{PARTITION}_count").to_pylist()), strict=True))

    def quarantine_groups(self, path: str) -> list[QuarantineGroup]:
        rows = self._columns(path, ["_error_class", TOPIC, PARTITION, OFFSET, "_kafka_timestamp"], [])
        if rows is None or not rows.num_rows:
            return []
        keys = ["_error_class", TOPIC, PARTITION]
        summary = rows.group_by(keys).aggregate([(OFFSET, "count"), (OFFSET, "min"), (OFFSET, "max"),
                                                 ("_kafka_timestamp", "max")])
        groups = [QuarantineGroup(r["_error_class"], r[TOPIC], int(r[PARTITION]), int(r[f"{OFFSET}_count"]),
                                  int(r[f"{OFFSET}_min"]), int(r[f"{OFFSET}_max"]),
                                  _naive_utc(r["_kafka_timestamp_max"]))
                  for r in summary.to_pylist()]
        return sorted(groups, key=lambda g: (g.error_class, g.topic, g.partition))

    def quarantined(self, path: str, *, limit: int, error_class: str | None = None) -> list[QuarantinedRecord]:
        import pyarrow as pa

        only = [("_error_class", "=", error_class)] if error_class is not None else []
        coordinates = self._columns(path, [TOPIC, PARTITION, OFFSET], only)
        if coordinates is None or not coordinates.num_rows or limit <= 0:
            return []
        first = sorted(zip(coordinates.column(PARTITION).to_pylist(), coordinates.column(OFFSET).to_pylist(),
                           coordinates.column(TOPIC).to_pylist(), strict=True))[:limit]
        wanted = set(first)
        rows = self._columns(path, [TOPIC, PARTITION, OFFSET, "_kafka_timestamp", "_schema_id", "_error_class",
                                    "_error_message", "_kafka_value", "_kafka_key"],
                             [*only, (PARTITION, "in", sorted({p for p, _, _ in first})),
                              (OFFSET, "in", sorted({o for _, o, _ in first}))])
        assert isinstance(rows, pa.Table)
        found = [QuarantinedRecord(r[TOPIC], int(r[PARTITION]), int(r[OFFSET]), _naive_utc(r["_kafka_timestamp"]),
                                   r["_schema_id"], r["_error_class"], r["_error_message"], r["_kafka_value"],
                                   r["_kafka_key"])
                 for r in rows.to_pylist() if (r[PARTITION], r[OFFSET], r[TOPIC]) in wanted]
        return sorted(found, key=lambda r: (r.partition, r.offset, r.topic))


def read_rows(path: str, version: int | None = None,
              storage_options: dict[str, str] | None = None) -> tuple[Any, str] | None:
    """Every row of the Delta table at `path` (as of `version`, else its latest) as a pyarrow Table of the table's
    own types (not the query engine's view types), and the table's schema as its log holds it (the JSON of Spark's
    StructType); None when there is no table. Read with delta-rs's query engine, which honours partition columns
    and skips nothing; JvmFreeReadError when delta-rs cannot read it."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, version=version, storage_options=storage_options)
    except TableNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a version gone, a feature or store delta-rs lacks
        raise _cannot(path, exc) from None
    try:
        target = pa.schema(table.schema().to_arrow())
        rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t"))
        return rows.select(target.names).cast(target), table.schema().to_json()
    except Exception as exc:  # noqa: BLE001
        raise _cannot(path, exc) from None


def change_feed(path: str, first: int, last: int, storage_options: dict[str, str] | None = None,
                limit: int | None = None) -> tuple[Any, str] | None:
    """The rows versions first..last of the table at `path` inserted (its change feed's inserts) as a pyarrow Table
    of the table's own types, and the table's schema (the JSON of Spark's StructType); None when they number more
    than `limit`; JvmFreeReadError when delta-rs cannot read them (no feed for those versions, a feature or store
    delta-rs lacks)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path, storage_options=storage_options)
        reader = pa.RecordBatchReader.from_stream(table.load_cdf(starting_version=first, ending_version=last))
        batches, count = [], 0
        for batch in reader:
            count += batch.num_rows
            if limit is not None and count > limit:
                return None
            batches.append(batch)
        target = pa.schema(table.schema().to_arrow())
        found = pa.Table.from_batches(batches, reader.schema)
        inserts = pc.equal(found["_change_type"].cast(pa.string()), "insert")
        # cast before filtering: pyarrow's `take` has no kernel for the view types delta-rs reads as
        return found.select(target.names).cast(target).filter(inserts), table.schema().to_json()
    except Exception as exc:  # noqa: BLE001
        raise _cannot(path, exc) from None


@dataclass(frozen=True)
class Snapshot:
    """A version of a table as its log gives it: its data files' URIs, its schema (the JSON of Spark's StructType)
    with the column names in order, and its partition columns."""

    files: tuple[str, ...]
    schema_json: str
    columns: tuple[str, ...]
    partition_columns: tuple[str, ...]


def snapshot(path: str, version: int | None = None,
             storage_options: dict[str, str] | None = None) -> Snapshot | None:
    """The table at `path` as of `version` (else its latest); None when delta-rs finds no table (or not that
    version). Other failures (a feature or store delta-rs lacks) raise as delta-rs raises them."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, version=version, storage_options=storage_options)
    except TableNotFoundError:
        return None
    schema = table.schema()
    return Snapshot(tuple(table.file_uris()), schema.to_json(), tuple(f.name for f in schema.fields),
                    tuple(table.metadata().partition_columns))


def dataset(path: str, storage_options: dict[str, str] | None = None) -> Any:
    """The table's latest rows as a pyarrow dataset (scanned lazily, batch by batch)."""
    from deltalake import DeltaTable

    return DeltaTable(path, storage_options=storage_options).to_pyarrow_dataset()


def query(path: str, statements: Sequence[str], storage_options: dict[str, str] | None = None) -> list[Any] | None:
    """Each SQL statement's answer (a pyarrow Table) over the table's latest rows, the table named `t` (delta-rs's
    query engine); None when there is no table; JvmFreeReadError when delta-rs cannot read it."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    try:
        engine = QueryBuilder().register("t", DeltaTable(path, storage_options=storage_options))
        return [pa.table(engine.execute(sql)) for sql in statements]
    except TableNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a feature or store delta-rs lacks: the caller reads with Spark
        raise _cannot(path, exc) from None


def commits(path: str, storage_options: dict[str, str] | None = None,
            limit: int | None = None) -> list[dict[str, Any]] | None:
    """The table's newest `limit` commit infos (None: all), newest first, as delta-rs gives them (version,
    timestamp, operation, operationParameters, operationMetrics, userMetadata); None when there is no table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, storage_options=storage_options)
    except TableNotFoundError:
        return None
    return list(table.history(limit))


def history(path: str, storage_options: dict[str, str] | None = None) -> list[BatchRecord] | None:
    """Every commit of the table that records offsets, oldest first; None when there is no Delta table at `path`
    (`storage_options`: delta-rs's, for a table in object storage)."""
    reader = DeltaRsReader(storage_options)
    return None if reader.version(path) is None else reader.history(path)


def _name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"unsupported filter value {value!r}")
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


def _condition(column: str, op: str, value: Any) -> str:
    if op == "in":
        return f"{_name(column)} IN ({', '.join(_literal(v) for v in value)})" if value else "FALSE"
    if op not in ("=", ">=", "<="):
        raise ValueError(f"unsupported filter operator {op!r}")
    return f"{_name(column)} {op} {_literal(value)}"


def _naive_utc(value: object) -> dt.datetime | None:
    """A timestamp as Spark's collect gives it here (UTC, no tzinfo)."""
    if not isinstance(value, dt.datetime):
        return None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def _cannot(path: str, exc: BaseException) -> JvmFreeReadError:
    text = str(exc).strip().splitlines()
    return JvmFreeReadError(f"delta-rs cannot read {path}: {text[0] if text else repr(exc)}")


def _commit_file_millis(path: str, version: object) -> int | None:
    """When the commit's file was written, in ms, as Spark's history and time travel by timestamp tell a version's
    time (the commit info's own timestamp is the writer's clock, a few ms earlier); None for a remote table."""
    if not isinstance(version, int) or "://" in path.removeprefix("file://"):
        return None
    log = Path(path.removeprefix("file://").removeprefix("file:")) / "_delta_log" / f"{version:020d}.json"
    try:
        return log.stat().st_mtime_ns // 1_000_000
    except OSError:
        return None


def recorded_offsets(config: PipelineConfig) -> dict[str, dict[str, int]] | None:
    """The next offsets the table's ledger records per topic and partition, read with delta-rs (no JVM): {} when
    the table does not exist or records none (only its creation), None when delta-rs cannot tell."""
    reader = DeltaRsReader(config.storage_options() or None)
    try:
        if not reader.version(config.table_path):
            return {}
        return next_offsets(reader.history(config.table_path))
    except JvmFreeReadError as exc:
        log.debug("%s: cannot read the table's offsets without a JVM: %s", config.name, exc)
        return None
