"""Idempotent appends through delta-rs, made by the driver: the driver-side write path's commits (and the MERGEs of
silver's driver steps, `merge`).

`write_deltalake` writes the rows' files with their statistics and commits them in one call, together with
`SetTransaction(app id, version)` (`CommitProperties.app_transactions`) and the ledger record as the commit's
`userMetadata` (`custom_metadata`): the actions Spark's DataFrame writer commits, so each engine reads the other's
commits and skips the other's (app id, version). It works on every store delta-rs writes to (local, S3 with its
conditional writes, ADLS, GCS) and on partitioned tables; a table delta-rs cannot write as asked (a table feature it
does not support, column mapping, rows of another schema) is refused with the reason, before anything is written,
and the caller writes with Spark. On a local table the commit's checksum file follows (`checksums`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ingestion import faults, state_files, storage
from ingestion.delta import checksums
from ingestion.errors import IngestionError, one_line

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

# Delta's column mapping: a file's columns then have physical names only Delta's writers know how to assign.
_COLUMN_MAPPING = "delta.columnMapping.mode"


class RsWriteError(IngestionError):
    """delta-rs refused or failed an append before committing it (nothing of it is in the table)."""


@dataclass(frozen=True)
class Merged:
    """What a MERGE did: delta-rs's metrics (`num_target_rows_inserted`, ...), and whether it committed (False: the
    table held its (app id, version) already, or the MERGE changed no row, which delta-rs does not commit)."""

    metrics: Mapping[str, Any]
    committed: bool


@dataclass(frozen=True)
class Appended:
    """What an append did: the table version after it, and whether it committed (False: the table held its
    (app id, version) already, nothing was written)."""

    version: int
    committed: bool


class RsTable:
    """One table as the driver appends to it, its delta-rs handle kept (and brought up to date) between appends."""

    def __init__(self, path: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.path = path
        self.storage_options = storage.delta_rs_write_options(path, storage_options) or None
        self.local = storage.local_folder(path)
        self._table: DeltaTable | None = None

    def table(self) -> DeltaTable:
        """The table as last read (`current`), read now if it never was."""
        return self._table if self._table is not None else self.current()

    def current(self) -> DeltaTable:
        """The table at its latest version (the log read again since the last call); RsWriteError when delta-rs
        cannot read it."""
        from deltalake import DeltaTable

        try:
            if self._table is None:
                self._table = DeltaTable(self.path, storage_options=self.storage_options)
            else:
                self._table.update_incremental()
        except Exception as exc:  # noqa: BLE001 - no table, or one delta-rs cannot read: Spark writes it
            self._table = None
            raise RsWriteError(f"delta-rs cannot read {self.path}: {type(exc).__name__}: {exc}") from None
        return self._table

    def refusal(self, schema: pa.Schema) -> str | None:
        """Why rows of `schema` cannot be appended here by delta-rs as they are (the table as last read), or None. (A
        table feature delta-rs does not write is found by the append itself, which then fails before committing.)"""
        try:
            table = self.table()
        except RsWriteError as exc:
            return str(exc)
        mode = table.metadata().configuration.get(_COLUMN_MAPPING, "none")
        if mode != "none":
            return f"the table uses column mapping ({mode})"
        found = pa.schema(table.schema().to_arrow())
        if not _same_columns(found, schema):
            return "the rows' schema differs from the table's"
        return None

    def committed_version(self, app_id: str) -> int:
        """The last version committed for `app_id` (SetTransaction) in the table as last read, -1 when none."""
        version = self.table().transaction_version(app_id)
        return -1 if version is None else int(version)

    def append(self, rows: pa.Table, *, app_id: str, txn_version: int, user_metadata: str,
               fault_id: int | None = None, overwrite: bool = False) -> Appended:
        """Append `rows` in one commit with SetTransaction(app_id, txn_version) and `user_metadata`, unless the table
        holds that (app id, version) already (in the table as last read: the caller reads it again first, under the
        pipeline's writer lock); `overwrite`: the rows replace the table's instead. RsWriteError when delta-rs
        refuses it (nothing committed)."""
        from deltalake import CommitProperties, PostCommitHookProperties, Transaction, write_deltalake

        table = self.table()
        held = table.transaction_version(app_id)
        if held is not None and int(held) >= txn_version:
            return Appended(table.version(), committed=False)
        before = table.version()
        properties = CommitProperties(
            custom_metadata={"userMetadata": user_metadata},
            app_transactions=[Transaction(app_id, txn_version, int(time.time() * 1000))])
        if fault_id is not None and faults.armed(faults.FaultPoint.FILES_WRITTEN, fault_id):
            self._leave_uncommitted_file(rows)
            faults.reached(faults.FaultPoint.FILES_WRITTEN, fault_id)
        try:
            write_deltalake(table, rows, mode="overwrite" if overwrite else "append",
                            partition_by=table.metadata().partition_columns or None,
                            commit_properties=properties,
                            # the pipeline writes its log checkpoints itself (delta/log_checkpoints.py), in the
                            # background and with the expired-log cleanup both engines expect
                            post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                                cleanup_expired_logs=False))
        except Exception as exc:  # noqa: BLE001 - whatever delta-rs refuses is written by Spark instead
            self._table = None
            raise RsWriteError(f"delta-rs did not append to {self.path}: {one_line(exc)[:300]}") from None
        version = self._committed(table, before, app_id, txn_version)
        if self.local is not None and not overwrite:
            checksums.write_after_append(self.local / "_delta_log", version)
        return Appended(version, committed=True)

    def merge(self, rows: pa.Table, on: str, *, update_when: str, update: Mapping[str, str], insert_when: str,
              insert: Mapping[str, str], delete_when: str | None, app_id: str, txn_version: int,
              user_metadata: str) -> Merged:
        """One MERGE of `rows` (alias `s`) into the table (alias `t`) on `on`, in DataFusion's SQL: matched rows
        deleted where `delete_when`, else updated (`update`: column to expression) where `update_when`; unmatched
        ones inserted where `insert_when`. Committed with SetTransaction(app_id, txn_version) and `user_metadata`,
        unless the table holds that (app id, version) already. RsWriteError when delta-rs refuses it (nothing
        committed)."""
        from deltalake import CommitProperties, PostCommitHookProperties, Transaction

        table = self.current()
        held = table.transaction_version(app_id)
        if held is not None and int(held) >= txn_version:
            history = table.history(1)
            return Merged(dict(history[0].get("operationMetrics") or {}) if history else {}, committed=False)
        before = int(table.version())
        properties = CommitProperties(custom_metadata={"userMetadata": user_metadata},
                                      app_transactions=[Transaction(app_id, txn_version, int(time.time() * 1000))])
        try:
            merger = table.merge(rows, on, source_alias="s", target_alias="t", commit_properties=properties,
                                 post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                                     cleanup_expired_logs=False))
            if delete_when is not None:
                merger = merger.when_matched_delete(delete_when)
            metrics = (merger.when_matched_update(dict(update), update_when)
                       .when_not_matched_insert(dict(insert), insert_when).execute())
        except Exception as exc:  # noqa: BLE001 - a feature delta-rs does not write: Spark merges instead
            self._table = None
            raise RsWriteError(f"delta-rs did not merge into {self.path}: {one_line(exc)[:300]}") from None
        table.update_incremental()
        return Merged(metrics, committed=int(table.version()) > before)

    def rows(self, columns: list[str], where: tuple[str, pa.Array] | None = None) -> pa.Table:
        """The table's `columns` as last read, of the table's own Arrow types; `where` (column, values): only the
        rows whose column holds one of the values, kept batch by batch as the files are read."""
        import pyarrow.compute as pc

        wanted = pa.schema([self.schema().field(c) for c in columns])
        kept = []
        # cast before filtering: pyarrow's `take` has no kernel for the view types delta-rs reads as
        for batch in self.table().to_pyarrow_dataset().to_batches(columns=columns):
            part = pa.Table.from_batches([batch]).cast(wanted)
            if where is not None:
                part = part.filter(pc.is_in(part[where[0]], value_set=where[1].cast(wanted.field(where[0]).type)))
            kept.append(part)
        return pa.concat_tables(kept) if kept else wanted.empty_table()

    def schema(self) -> pa.Schema:
        """The table's columns, as last read."""
        return pa.schema(self.table().schema().to_arrow())

    def _leave_uncommitted_file(self, rows: pa.Table) -> None:
        """For a test's `files_written` fault: `rows` as a data file in the table's folder that no commit names, as
        a writer killed between its file write and its commit leaves one (delta-rs writes and commits in one call,
        with no point between them to stop at)."""
        import pyarrow.parquet as pq

        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        if self.local is not None:
            pq.write_table(rows, self.local / name, compression="snappy")
            return
        found = state_files.filesystem(self.path, self.storage_options or {})
        if found is not None:
            filesystem, folder = found
            pq.write_table(rows, f"{folder}/{name}", compression="snappy", filesystem=filesystem)

    def _committed(self, table: DeltaTable, before: int, app_id: str, txn_version: int) -> int:
        """The version the append committed: the table's, unless another writer committed after it (then the
        log is searched for the commit carrying this app id's version)."""
        table.update_incremental()
        version = int(table.version())
        if version == before + 1:
            return version
        for entry in table.history(version - before):
            if _carries(entry, app_id, txn_version):
                return int(entry["version"])
        return version


def _carries(commit_info: Mapping[str, Any], app_id: str, txn_version: int) -> bool:
    """Whether a history entry is this append's: its userMetadata is the ledger record of this app id and version
    (a commit's actions are not in its history entry)."""
    try:
        body = json.loads(commit_info.get("userMetadata") or "{}").get("ingest", {})
    except ValueError:
        return False
    return body.get("app_id") == app_id and body.get("batch_id") == txn_version


def _same_columns(table: pa.Schema, rows: pa.Schema) -> bool:
    """Whether the rows have the table's columns, names and types (nullability aside: delta-rs checks it)."""
    if table.names != rows.names:
        return False
    return all(_same_type(a.type, b.type) for a, b in zip(table, rows, strict=True))


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return [f.name for f in a] == [f.name for f in b] and all(
            _same_type(x.type, y.type) for x, y in zip(a, b, strict=True))
    if (pa.types.is_list(a) or pa.types.is_large_list(a)) and (pa.types.is_list(b) or pa.types.is_large_list(b)):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    for kinds in ((pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view),
                  (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)):
        if any(k(a) for k in kinds) and any(k(b) for k in kinds):
            return True
    return bool(a == b)
