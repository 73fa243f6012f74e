"""The Delta side of a shadow (`ops/shadow.py`, docs/reprocessing.md): a table's rows of some Kafka offset spans
read without a JVM (delta-rs), the same spans of a live table replaced in one commit carrying a txn action and a
ledger record (Spark's `replaceWhere` overwrite), and a shadow table removed.

A span is (topic, partition, first, last), both ends inclusive; the condition naming a list of them is one SQL
expression over bronze's and quarantine's coordinate columns, read alike by Spark and by delta-rs's engine.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ingestion import state_files, storage
from ingestion.delta.commit import Txn
from ingestion.delta.reader import JvmFreeReadError

TOPIC, PARTITION, OFFSET = "_kafka_topic", "_kafka_partition", "_kafka_offset"
Span = tuple[str, int, int, int]  # topic, partition, first, last (inclusive)


def condition(spans: Iterable[Span]) -> str:
    """The SQL condition of rows whose coordinates fall in one of `spans` (FALSE for none)."""
    parts = [f"({TOPIC} = '{topic.replace(chr(39), chr(39) * 2)}' AND {PARTITION} = {int(partition)} AND "
             f"{OFFSET} BETWEEN {int(first)} AND {int(last)})" for topic, partition, first, last in spans]
    return " OR ".join(parts) if parts else "FALSE"


def rows_in_spans(path: str, spans: Iterable[Span], storage_options: Mapping[str, str] | None = None) -> Any:
    """The rows of the Delta table at `path` (its latest version) whose coordinates fall in `spans`, as a pyarrow
    Table of the table's own types; None when there is no table. delta-rs, no JVM; JvmFreeReadError when it
    cannot read the table."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, storage_options=dict(storage_options or {}) or None)
    except TableNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - a feature or store delta-rs lacks
        raise JvmFreeReadError(f"delta-rs cannot read {path}: {exc}") from None
    try:
        target = pa.schema(table.schema().to_arrow())
        rows = pa.table(QueryBuilder().register("t", table).execute(f"SELECT * FROM t WHERE {condition(spans)}"))
        return rows.select(target.names).cast(target)
    except Exception as exc:  # noqa: BLE001
        raise JvmFreeReadError(f"delta-rs cannot read {path}: {exc}") from None


def replace_spans(rows: DataFrame, path: str, spans: Iterable[Span], txn: Txn, metadata: str) -> None:
    """Replace the rows of the table at `path` in `spans` with `rows` (all of them inside the spans, Delta checks)
    in ONE commit carrying `txn` and `metadata`; columns `rows` has and the table lacks are added. Delta skips the
    commit when the table holds `txn` already (a rerun after a crash)."""
    (rows.write.format("delta").mode("overwrite")
     .option("replaceWhere", condition(spans))
     .option("txnAppId", txn.app_id).option("txnVersion", txn.version)
     .option("userMetadata", metadata)
     .option("mergeSchema", "true")
     .save(path))


def create_like(spark: SparkSession, source: str, path: str) -> None:
    """An empty Delta table at `path` with the schema, partitioning and table properties of the one at `source` (a
    route table a shadow made and the live pipeline lacks); nothing when one is there already. No rows, so no txn:
    the rows come in the next commit, which carries it."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, source).detail().collect()[0]
    builder = (DeltaTable.createIfNotExists(spark).location(path)
               .addColumns(spark.read.format("delta").load(source).schema))
    if detail["partitionColumns"]:
        builder = builder.partitionedBy(*detail["partitionColumns"])
    for key, value in sorted((detail["properties"] or {}).items()):
        builder = builder.property(key, value)
    builder.execute()


def remove_table(path: str, settings: Mapping[str, str] | None = None) -> bool:
    """Delete the table's folder (a local folder, or a prefix in S3); whether anything was there. Another store:
    JvmFreeReadError (not yet)."""
    folder = storage.local_folder(path)
    if folder is not None:
        if not folder.exists():
            return False
        shutil.rmtree(folder)
        return True
    found = state_files.filesystem(path, storage.delta_rs_options(dict(settings or {}), path))
    if found is None:
        raise JvmFreeReadError(f"cannot remove {path}: only local folders and S3 are reached without a JVM (not yet)")
    fs, where = found
    from pyarrow import fs as pafs

    if fs.get_file_info(where).type == pafs.FileType.NotFound:
        return False
    fs.delete_dir(where)
    return True
