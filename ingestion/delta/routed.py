"""A routed pipeline's tables (docs/routing.md): found where they live, not listed anywhere else.

A route's table is `<sink.root>/tables/<table>`, its name the `routing.table` template's (or a `routing.tables`
name); it is the pipeline's when its ledger says so: a commit of the pipeline with the txnAppId
`<checkpoint id>.<table>` (or a replay's, reprocess's or rewind's record, `replay.<table>`, ...). So `status`,
`verify`, `history` and the writer's restart all see the same tables, including those of routes first seen by an
earlier run, with nothing to keep in step, locally as in object storage.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterable

from ingestion import storage
from ingestion.config import PipelineConfig
from ingestion.delta import rs_reads
from ingestion.delta.ledger import BatchKind, BatchRecord, next_offsets
from ingestion.delta.reader import JvmFreeReadError
from ingestion.errors import one_line

log = logging.getLogger(__name__)


def name_pattern(config: PipelineConfig) -> re.Pattern[str]:
    """The table names the template can give (`{route}`: [a-z0-9_]+), and the names `routing.tables` gives."""
    assert config.routing is not None
    template = re.escape(config.routing.table).replace(re.escape("{pipeline}"), re.escape(config.name))
    named = "|".join(re.escape(t) for t in config.routing.tables.values())
    return re.compile(template.replace(re.escape("{route}"), "[a-z0-9_]+") + (f"|{named}" if named else ""))


def route_tables(config: PipelineConfig) -> dict[str, str]:
    """The route tables the pipeline has written, table name -> path, sorted by name: the folders under
    `<sink.root>/tables` that the name template can give and whose ledger is the pipeline's, in a local folder or
    in object storage (listed and read with delta-rs and the pipeline's storage options, no JVM)."""
    return {name: path for name, (path, _) in _route_ledgers(config).items()}


def _route_ledgers(config: PipelineConfig) -> dict[str, tuple[str, list[BatchRecord]]]:
    """Each route table's path and ledger (read once: the ledger also says whether the table is the pipeline's)."""
    if config.routing is None:
        return {}
    folder = config.route_path("x").rsplit("/", 1)[0]
    pattern = name_pattern(config)
    options = config.storage_options() or None
    found = {}
    for name in _folders(folder, options):
        if not pattern.fullmatch(name):
            continue
        path = config.route_path(name)
        records = rs_reads.history(path, options) or []
        if any(r.pipeline == config.name and r.app_id.endswith(f".{name}") for r in records):
            found[name] = (path, records)
    return found


def _ledgers(config: PipelineConfig) -> list[list[BatchRecord]]:
    """The ledgers of `ledger_paths`, each table's read once."""
    quarantine = rs_reads.history(config.quarantine_path, config.storage_options() or None) or []
    return [*(records for _, records in _route_ledgers(config).values()), quarantine]


def _folders(folder: str, options: dict[str, str] | None) -> list[str]:
    """The names of the folder's sub-folders, sorted: a local folder's, or the common prefixes under it in object
    storage (S3, ADLS, GCS: listed by delta-rs's object store, as the tables there are read)."""
    local = storage.local_folder(folder)
    if local is not None:
        return sorted(c.name for c in local.iterdir() if c.is_dir()) if local.is_dir() else []
    from deltalake.fs import DeltaStorageHandler
    from pyarrow import fs

    try:
        found = DeltaStorageHandler(folder, options).get_file_info_selector(
            fs.FileSelector("", allow_not_found=True))
    except Exception as exc:  # noqa: BLE001 - a store or credentials delta-rs cannot use: said in one line
        raise JvmFreeReadError(f"delta-rs cannot list the route tables under {folder}: {one_line(exc)}") from None
    return sorted(f.base_name for f in found if f.type == fs.FileType.Directory)


def ledger_paths(config: PipelineConfig) -> list[str]:
    """The tables whose ledgers together say which offsets the pipeline holds: bronze; a routed pipeline's route
    tables and its quarantine (the records without a route are only there)."""
    if config.routing is None:
        return [config.table_path]
    return [*route_tables(config).values(), config.quarantine_path]


def data_paths(config: PipelineConfig) -> list[str]:
    """The tables that hold the pipeline's records: bronze (or the route tables) and quarantine."""
    if config.routing is None:
        return [config.table_path, config.quarantine_path]
    return [*route_tables(config).values(), config.quarantine_path]


def named_paths(config: PipelineConfig) -> list[tuple[str, str]]:
    """`data_paths` with a name each: `bronze` (or each route table's name) and `quarantine`."""
    if config.routing is None:
        return [("bronze", config.table_path), ("quarantine", config.quarantine_path)]
    return [*route_tables(config).items(), ("quarantine", config.quarantine_path)]


def route_keys_in_table(config: PipelineConfig, path: str) -> list[tuple[str, int, int, str | None]]:
    """(topic, partition, offset, route key) of each row of a route table, the key read again from the row's own
    columns as the writer read it from the Kafka record (`decode.routes`): its topic, its header, its field (or
    Kafka key), or its schema id."""
    import json

    from deltalake import DeltaTable

    assert config.routing is not None
    routing = config.routing
    coordinates = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    column = {"topic": "_kafka_topic", "header": "_kafka_headers", "recordName": "_schema_id"}.get(
        routing.by, routing.route_field)
    table = DeltaTable(path, storage_options=config.storage_options() or None)
    rows = table.to_pyarrow_table(columns=list(dict.fromkeys([*coordinates, column]))).to_pylist()
    out = []
    for row in rows:
        value = row[column]
        if routing.by == "header":
            key = next((h["value"].decode("utf-8", "replace") for h in value or () if h["key"] == routing.header
                        and h["value"] is not None), None)
        elif value is None or isinstance(value, str):
            key = value
        elif isinstance(value, bytes):
            key = value.decode("utf-8", "replace")
        else:
            key = json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
        out.append((row["_kafka_topic"], row["_kafka_partition"], row["_kafka_offset"], key or None))
    return out


def rewound(config: PipelineConfig) -> bool:
    """Whether a rewind is the last thing that changed which batches the tables hold: the newest rewind commit
    (`ingest rewind`, which leaves every batch whole in all the tables or in none) is newer than the newest stream
    batch's commit in any of them. A new checkpoint then resumes from the tables' offsets, exactly once."""
    newest: dict[BatchKind, dt.datetime] = {}
    for records in _ledgers(config):
        for record in records:
            if record.kind in (BatchKind.STREAM, BatchKind.REWIND) and record.committed_at is not None:
                newest[record.kind] = max(newest.get(record.kind, record.committed_at), record.committed_at)
    rewind, stream = newest.get(BatchKind.REWIND), newest.get(BatchKind.STREAM)
    return rewind is not None and (stream is None or rewind > stream)


def recorded_offsets(config: PipelineConfig) -> dict[str, dict[str, int]] | None:
    """Per topic and partition, the offset after the last one any of a routed pipeline's tables holds (each table's
    ledger, read with delta-rs, honouring its rewinds as a bronze table's does): where an available-now run counts
    from, and where a new checkpoint resumes after a rewind. A pipeline without routing: its bronze table's
    (`rs_reads.recorded_offsets`: {} without a table, None when delta-rs cannot tell)."""
    if config.routing is None:
        return rs_reads.recorded_offsets(config)
    return held_offsets(_ledgers(config))


def held_offsets(ledgers: Iterable[list[BatchRecord]]) -> dict[str, dict[str, int]]:
    """Per topic and partition, the offset after the last one any of these tables' ledgers holds (each honouring
    its own rewinds)."""
    out: dict[str, dict[str, int]] = {}
    for records in ledgers:
        for topic, parts in next_offsets(records).items():
            done = out.setdefault(topic, {})
            for partition, offset in parts.items():
                done[partition] = max(done.get(partition, 0), offset)
    return out
