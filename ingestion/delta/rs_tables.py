"""A table's state and its creation through delta-rs (`deltalake`), without a JVM: a pipeline's tables are made
before its Spark session exists, while the JVM boots (docs/architecture.md#tables-before-the-jvm).

Where delta-rs cannot do what Spark's Delta would (a table feature it cannot read, a property it refuses, an
object store it cannot write to without a lock), `JvmFreeReadError` or a False from `create` says so and the
caller does it with Spark. delta-rs creates only the tables whose protocol Spark makes legacy (reader 1, writer
2), which it writes as Spark does. Where a table needs table features (a timestamp_ntz or variant column, the
change feed, a property that turns one on), delta-rs's protocol would differ from Spark's and leave out legacy
features Spark counts as in use (`invariants` of a nested NOT NULL field, which Spark then refuses to read), so
Spark makes those.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import types as T

if TYPE_CHECKING:
    from deltalake import DeltaTable

from ingestion import state_files, storage
from ingestion.delta.reader import JvmFreeReadError
from ingestion.schema import protobuf_schemas

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableState:
    """What a table at a path is now: whether it exists, its columns and its properties."""

    exists: bool
    schema: T.StructType | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


def state(path: str, storage_options: Mapping[str, str] | None = None) -> TableState:
    """The table at `path` as delta-rs reads its log; JvmFreeReadError when delta-rs cannot read it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, storage_options=dict(storage_options or {}) or None)
        schema = T.StructType.fromJson(json.loads(table.schema().to_json()))
        properties = dict(table.metadata().configuration)
    except TableNotFoundError:
        return TableState(exists=False)
    except Exception as exc:  # noqa: BLE001 - an unsupported feature or store: the caller reads with Spark
        raise JvmFreeReadError(f"delta-rs cannot read {path}: {type(exc).__name__}: {exc}") from None
    return TableState(exists=True, schema=schema, properties=properties)


def create(path: str, schema: T.StructType, *, partition_by: Sequence[str] = (), properties: Mapping[str, str],
           comment: str = "", storage_options: Mapping[str, str] | None = None) -> bool:
    """Create an empty table (version 0: protocol and metadata) unless one exists; False when delta-rs refuses
    (the caller creates it with Spark). Delta's schema JSON is Spark's, so the columns are exactly `schema`'s."""
    from deltalake import DeltaTable, Schema

    if not _legacy(schema, properties):
        return False
    try:
        # raise_if_key_not_exists=False: delta-rs refuses any key but Delta's unless told, and the project's own
        # (TABLE_PROPERTY) is not one; the keys reaching here are LEGACY_PROPERTIES only (`_legacy`).
        DeltaTable.create(path, Schema.from_json(schema.json()), mode="ignore", partition_by=list(partition_by) or None,
                          configuration=dict(properties), description=comment or None,
                          storage_options=dict(storage_options or {}) or None, raise_if_key_not_exists=False)
    except Exception as exc:  # noqa: BLE001 - whatever delta-rs refuses, Spark's Delta is asked instead
        log.debug("delta-rs did not create %s (%s: %s); creating it with Spark", path, type(exc).__name__, exc)
        return False
    write_first_checksum(path)
    return True


def write_first_checksum(path: str) -> bool:
    """Write the checksum file (`00000000000000000000.crc`) of a local table whose only version is the empty
    creation delta-rs wrote, as Spark's Delta writes one for each of its commits; True when written.

    Without it, the first JVM transaction on the table reconstructs the whole state with Spark jobs to learn its
    protocol, metadata and set transactions (a new pipeline's first batch spent about 5 s there), and its commit
    computes the next checksum from scratch. An empty table's checksum is exact: no files, no bytes, no set
    transactions or domains, and the creation's own protocol and metadata (Delta's `validateChecksum` agrees).
    Nothing is written for a table that has moved on, for one with table features or other actions, or in
    object storage (there the first JVM commit computes the checksum, as before)."""
    table = storage.local_folder(path)
    if table is None:
        return False
    folder = table / "_delta_log"
    first, checksum = folder / f"{0:020d}.json", folder / f"{0:020d}.crc"
    if checksum.exists() or (folder / f"{1:020d}.json").exists() or not first.exists():
        return False
    actions = [json.loads(line) for line in first.read_text().splitlines() if line.strip()]
    found: dict[str, list[dict[str, object]]] = {}
    for action in actions:
        for name, body in action.items():
            found.setdefault(name, []).append(body)
    if set(found) - {"commitInfo", "protocol", "metaData"} or len(found.get("protocol", ())) != 1 \
            or len(found.get("metaData", ())) != 1 or set(found["protocol"][0]) - _LEGACY_PROTOCOL_KEYS:
        return False
    body = {"tableSizeBytes": 0, "numFiles": 0, "numMetadata": 1, "numProtocol": 1, "setTransactions": [],
            "domainMetadata": [], "metadata": found["metaData"][0], "protocol": found["protocol"][0], "allFiles": []}
    try:
        with checksum.open("x") as out:  # never over one a writer made meanwhile
            json.dump(body, out, separators=(",", ":"))
    except FileExistsError:
        return False
    return True


_LEGACY_PROTOCOL_KEYS = frozenset({"minReaderVersion", "minWriterVersion"})

# Legacy writer versions whose tables delta-rs checkpoints as Spark's Delta does: appendOnly and invariants (2),
# checkConstraints (3), the change feed and generated columns (4). Table features, column mapping (5) and
# identity columns (6) are left to Spark's Delta.
_CHECKPOINTED_WRITER_VERSIONS = frozenset({1, 2, 3, 4})


def checkpoint(path: str, version: int | None = None, options: Mapping[str, str] | None = None) -> int | None:
    """Write the Delta log checkpoint of a table at `version` (its latest when None) through delta-rs, then drop
    the log files older than its `delta.logRetentionDuration` (30 days by default) unless
    `delta.enableExpiredLogCleanup` is false, as Spark's Delta does after each of its checkpoints; the version
    checkpointed, or None when the table is left to Spark's Delta (a reader version above 1, a writer version above
    4 or table features, a table delta-rs cannot read or checkpoint). `options`: delta-rs's storage options of a
    table in object storage.

    A checkpoint is Parquet of the table's state: the same protocol, metadata, files with their statistics, set
    transactions and tombstones whichever library writes it, and Spark's Delta starts from it alike. delta-rs
    replays the log in Rust, in milliseconds, where Spark's Delta runs Spark jobs that generate code for the whole
    action schema in every task: about 1 s of CPU per checkpoint in a warm JVM
    (docs/performance.md#delta-log-checkpoints-through-delta-rs). In object storage it matters more: commits made by
    delta-rs leave Spark's snapshot behind, and every reader (delta-rs's next append included) lists and replays the
    commits since the newest checkpoint."""
    folder = storage.local_folder(path)
    try:
        table = _checkpointable(path, version, options)
        if table is None:
            return None
        table.create_checkpoint()
    except Exception as exc:  # noqa: BLE001 - whatever delta-rs cannot do, Spark's Delta is asked instead
        log.debug("delta-rs did not checkpoint %s (%s: %s); Spark's Delta will", path, type(exc).__name__, exc)
        return None
    written = table.version()
    if table.metadata().configuration.get("delta.enableExpiredLogCleanup", "true").strip().lower() != "false":
        try:
            table.cleanup_metadata()
            if folder is not None:
                _drop_orphans(folder / "_delta_log")
        except Exception as exc:  # noqa: BLE001 - the checkpoint stands; expired files go with the next one
            log.warning("delta-rs checkpointed %s at version %d but did not remove expired log files: %s: %s",
                        path, written, type(exc).__name__, exc)
    return written


def _drop_orphans(log_folder: Path) -> None:
    """Remove what delta-rs's log cleanup leaves of the versions it removed and Spark's would have removed with
    them: the checksum files (`NNN.crc`) of versions older than the oldest commit left, and the hidden `.NAME.crc`
    files Hadoop's local file system writes beside each file, of those versions' files no longer there."""
    names = {entry.name for entry in log_folder.iterdir()}
    commits = [int(name[:20]) for name in names if len(name) == 25 and name.endswith(".json") and name[:20].isdigit()]
    if not commits:
        return
    oldest = min(commits)

    def expired(name: str) -> bool:
        version = name[1:21] if name.startswith(".") else name[:20]  # only versioned names: no writer's temp file
        return version.isdigit() and int(version) < oldest

    for name in [n for n in names if len(n) == 24 and n.endswith(".crc") and expired(n)]:
        (log_folder / name).unlink(missing_ok=True)
        names.discard(name)
    for name in names:
        if name.startswith(".") and name.endswith(".crc") and name[1:-4] not in names and expired(name):
            (log_folder / name).unlink(missing_ok=True)


def checkpointed_by_rs(path: str, options: Mapping[str, str] | None = None) -> bool:
    """Whether `checkpoint` writes the checkpoints of the table at `path` (as it is now)."""
    try:
        return _checkpointable(path, None, options) is not None
    except Exception:  # noqa: BLE001 - a table delta-rs cannot read is Spark's
        return False


def _checkpointable(path: str, version: int | None = None,
                    options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """The table at `path` (at `version`) as delta-rs reads it, when its protocol is one `checkpoint` writes."""
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version, storage_options=dict(options) if options else None)
    protocol = table.protocol()
    legacy = protocol.min_reader_version == 1 and protocol.min_writer_version in _CHECKPOINTED_WRITER_VERSIONS \
        and not protocol.writer_features and not protocol.reader_features
    return table if legacy else None


def last_checkpoint(path: str, options: Mapping[str, str] | None = None) -> int | None:
    """The version of a table's newest checkpoint as its `_delta_log/_last_checkpoint` says (-1: none), or None
    when it cannot be read without a JVM (a store other than a local disk or S3)."""
    folder = storage.local_folder(path)
    try:
        if folder is not None:
            text = (folder / "_delta_log" / "_last_checkpoint").read_text()
        else:
            found = state_files.filesystem(path, options or {})
            if found is None:
                return None
            filesystem, where = found
            with filesystem.open_input_stream(f"{where}/_delta_log/_last_checkpoint") as stream:
                text = stream.read().decode()
        return int(json.loads(text)["version"])
    except FileNotFoundError:
        return -1
    except (ValueError, KeyError, TypeError):
        return -1  # a partial or foreign file: the next checkpoint comes `every` versions from version 0


# The properties of tables this project creates that keep a legacy protocol; any other (a user's
# sink.tableProperties) has Spark make the table.
LEGACY_PROPERTIES = frozenset({
    "delta.checkpointInterval", "delta.deletedFileRetentionDuration", "delta.logRetentionDuration",
    "delta.setTransactionRetentionDuration", "delta.dataSkippingStatsColumns", "delta.dataSkippingNumIndexedCols",
    "delta.autoOptimize.autoCompact", "delta.appendOnly", protobuf_schemas.TABLE_PROPERTY})
_FEATURE_TYPES = (T.TimestampNTZType, T.VariantType)


def _legacy(schema: T.StructType, properties: Mapping[str, str]) -> bool:
    """Whether a table of this schema and these properties has a legacy protocol (no table features)."""
    return set(properties) <= LEGACY_PROPERTIES and not _has_feature_type(schema)


def _has_feature_type(kind: T.DataType) -> bool:
    if isinstance(kind, _FEATURE_TYPES):
        return True
    if isinstance(kind, T.StructType):
        return any(_has_feature_type(f.dataType) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return _has_feature_type(kind.elementType)
    if isinstance(kind, T.MapType):
        return _has_feature_type(kind.keyType) or _has_feature_type(kind.valueType)
    return False
